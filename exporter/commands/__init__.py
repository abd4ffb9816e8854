"""One module per CLI command; see exporter.cli."""
