"""Public catalog names of Hugging Face entries (activities/catalog/names.py)."""

from __future__ import annotations

import pytest

from servingops.activities.catalog.names import DNS1123_SUBDOMAIN, public_name, public_names

pytestmark = pytest.mark.unit


def test_a_repository_id_becomes_a_dns_subdomain() -> None:
    assert public_name("Qwen/Qwen2.5-7B_instruct") == "qwen--qwen2.5-7b-instruct"
    assert public_name("gpt2") == "gpt2"
    assert public_name("meta-llama/Llama-3.1-8B") == "meta-llama--llama-3.1-8b"
    assert public_name("org/_odd_.name_") == "org---odd.name"
    for odd in ("org/..", "a/" + "x" * 300, "__/__"):
        name = public_name(odd)
        assert DNS1123_SUBDOMAIN.match(name) and len(name) <= 253, (odd, name)


def test_colliding_ids_each_get_their_own_name() -> None:
    names = public_names(["Org/Model", "org/model", "other/model"])
    assert names["other--model"] == "other/model"
    colliding = {n: r for n, r in names.items() if r in ("Org/Model", "org/model")}
    assert len(colliding) == 2 and all(n.startswith("org--model-") for n in colliding)
    assert public_names(["org/model", "Org/Model", "other/model"]) == names, "a pure function of the set"
