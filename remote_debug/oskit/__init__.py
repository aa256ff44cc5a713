"""Standard-library OS helpers both sides need: atomic files, process identity, peer uids, namespaces."""
