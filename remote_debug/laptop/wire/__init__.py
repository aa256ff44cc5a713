"""What the CLI prints for programs (the VS Code extension): every JSON document, defined once."""
