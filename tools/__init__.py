"""Dev-time tools of the repository (not shipped): ``generate_wire.py`` writes the extension's wire types."""
