"""Hand-made cancel bugs as patches, and the runner that checks each is still caught (see README.md)."""
