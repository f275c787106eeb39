"""The networks. One file per model, each readable next to its paper.

The contract every network follows (the one LightningModule, ``PairClassifier``, relies on it):

Constructor
    ``__init__(self, embedding: nn.Embedding, num_classes: int, ...)``. The backbone builds the
    word-embedding layer (GloVe / random, frozen or trainable, padding row zero, padding id 0)
    and passes it in, together with the number of classes. If the signature also declares
    ``vocab`` (``list[str]``, index -> token), the backbone passes the vocabulary too (DIIN
    derives character ids from it). Every other argument comes from ``conf/model/<name>.yaml``.
    Check dimensions up front and raise ``ConfigError`` with a message that names the knob.

Forward
    Pair models: ``forward(premise, premise_mask, hypothesis, hypothesis_mask,
    return_details=False)`` with token ids ``(batch, len)`` (long) and masks ``(batch, len)``
    (bool, True on real tokens; every sentence has >= 1 real token). Sentence models:
    ``forward(sentence, sentence_mask, return_details=False)``. Returns a dict with
    ``"logits"`` ``(batch, num_classes)``; with ``return_details=True`` it also holds the
    intermediate maps (attention, interaction norms, gates) for analysis.

Optional hooks
    ``regularization_loss() -> Tensor``: added to the cross-entropy (DIIN's encoder-difference
    penalty, DCNN's per-layer L2). ``paper_parameter_count() -> int``: the count under the
    paper's own convention where it differs from the true count (see SPEC / README).
    ``validate_config(**net_config)`` (a staticmethod): cheap checks of the config values,
    run before any data is read so that a bad ``dim`` fails in a second, not after tokenising.
"""
