"""podres-exporter: the I/O side (sources, collectors, web, history, CLI)."""

__version__ = "0.1.0"
# The project's home (docs/design.md#packaging): pyproject's Project-URLs, the image's source
# label, the chart's home, the README, the runbook and the demo's banner name it, and
# tests/deploy/test_packaged_links.py checks that they agree with this.
HOME = "https://github.com/podres-exporter/podres-exporter"
DOCS = HOME + "/tree/main/docs"
