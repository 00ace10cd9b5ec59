"""The image an SBOM becomes: normalised, duplicates merged, checked, and as it travels."""

from __future__ import annotations

import msgspec
import pytest

from streamproc.impact import keys as K
from streamproc.sbom.image import ImageError, IndexedImage, build_image
from streamproc.sbom.purls import PurlError


def test_images_on_the_wire() -> None:
    rec = build_image(
        tenant="t1",
        digest="a",
        purls=["pkg:npm/@angular/core@16.0.0"],
        used=[True],
        labels={"k": "v"},
    )
    wire = msgspec.json.encode(rec)
    assert b'"productKeys"' in wire
    assert msgspec.json.decode(wire, type=IndexedImage) == rec
    bad = b'{"tenant":"t","digest":"d","purls":["pkg:pypi/a@1"],"productKeys":[],"used":[]}'
    with pytest.raises(msgspec.ValidationError, match="same length"):
        msgspec.json.decode(bad, type=IndexedImage)
    with pytest.raises(ImageError):
        IndexedImage(tenant="", digest="d")
    with pytest.raises(ImageError):  # the impact index's key separator
        IndexedImage(tenant=f"a{K.SEP}b", digest="d")


def test_build_image_merges_duplicates() -> None:
    rec = build_image(
        tenant="t1",
        digest="a",
        purls=["pkg:pypi/Django@4.2", "pkg:pypi/django@4.2"],
        used=[False, True],
    )
    assert (rec.purls, rec.product_keys, rec.used) == (
        ["pkg:pypi/django@4.2"],
        ["pkg:pypi/django"],
        [True],
    )
    assert rec.usage_known
    assert not build_image(tenant="t1", digest="a", purls=["pkg:pypi/ok@1"]).usage_known
    with pytest.raises(PurlError):
        build_image(tenant="t1", digest="a", purls=["pkg:pypi/ok@1", "bad"])
    with pytest.raises(ImageError, match="one flag per purl"):
        build_image(tenant="t1", digest="a", purls=["pkg:pypi/ok@1"], used=[])
