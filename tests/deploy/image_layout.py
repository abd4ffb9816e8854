"""The OCI layout built by deploy/image/build.sh, for the tests that run the image
(tests/deploy/test_image.py, tests/realnode/test_image_on_node.py): one rule for where it
is and what its absence means."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


def built_layout() -> Path:
    """``PODRES_IMAGE_OCI`` when it holds a layout; else a skip, or a failure under
    ``PODRES_REQUIRE_IMAGE=1`` (CI builds the image, so there it must run)."""
    path = os.environ.get("PODRES_IMAGE_OCI")
    if path and (Path(path) / "index.json").exists():
        return Path(path)
    why = ("no image: build it with deploy/image/build.sh and set PODRES_IMAGE_OCI to its "
           "oci/ directory")
    if os.environ.get("PODRES_REQUIRE_IMAGE") == "1":
        pytest.fail(f"{why} (PODRES_REQUIRE_IMAGE=1)", pytrace=False)
    pytest.skip(why)
