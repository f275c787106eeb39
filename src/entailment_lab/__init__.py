"""entailment_lab: textual-entailment experiments on Lightning + Hydra + W&B."""
