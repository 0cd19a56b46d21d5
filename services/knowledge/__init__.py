"""Knowledge: the operator's documents cut into passages, indexed for full-text and vector retrieval."""
