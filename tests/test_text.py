from entailment_lab.data.text import PAD, UNK, UNK_ID, Vocabulary, tokenize


def test_tokenize_matches_ptb_tokenised_snli():
    raw = "Two women are embracing while holding to go packages."
    ptb = "Two women are embracing while holding to go packages ."
    assert tokenize(raw) == tokenize(ptb) == ptb.split()


def test_tokenize_clitics_numbers_abbreviations():
    assert tokenize("It's a dog that doesn't bark.") == [
        "It", "'s", "a", "dog", "that", "does", "n't", "bark", "."]
    assert tokenize("The U.S. costs 3.5 dollars, 1,000 times") == [
        "The", "U.S.", "costs", "3.5", "dollars", ",", "1,000", "times"]
    assert tokenize("a well-known man can't swim...") == [
        "a", "well-known", "man", "ca", "n't", "swim", "..."]


def test_tokenize_lowercase_choice():
    assert tokenize("A Man", lowercase=True) == ["a", "man"]
    assert tokenize("A Man") == ["A", "Man"]


def test_vocabulary_is_deterministic_and_reserved_ids():
    vocab = Vocabulary.build([["b", "a", "b"], ["c", "a", "b"]])
    assert vocab.itos == [PAD, UNK, "b", "a", "c"]  # by count, ties alphabetical
    assert vocab.encode(["a", "zzz"]) == [3, UNK_ID]
    assert vocab.decode([2, 4]) == ["b", "c"]
    assert Vocabulary.build([["x", "y", "x"]], min_freq=2).itos == [PAD, UNK, "x"]
