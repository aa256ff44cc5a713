"""The one contract between the laptop side and the job side: stdlib only, imported by both."""
