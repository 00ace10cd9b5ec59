"""The typed sections: generated from the registry (and current), decoded once at start, so
a bad value of any section stops every process, named as ``config check`` names it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest

from streamproc import config
from streamproc.configfile import generate
from streamproc.configfile.loader import ConfigFileError, activate
from streamproc.configfile.registry import KEYS, SECTIONS
from streamproc.configfile.sections import Sections
from streamproc.configfile.typed import decode, field_name
from streamproc.planner import settings as planner_settings


def test_the_generated_module_is_the_registry() -> None:
    assert generate.TARGET.read_text() == generate.render(), "run `make schemas`"


def test_every_key_has_its_typed_field_and_default() -> None:
    sections = Sections()
    assert set(Sections.__struct_fields__) == {field_name(s) for s in SECTIONS}
    for key in KEYS:
        value = getattr(getattr(sections, field_name(key.section)), key.name)
        expected = tuple(key.default) if isinstance(key.default, list) else key.default
        assert value == expected, key.path


def test_bounds_and_choices_are_in_the_types_too() -> None:
    """msgspec itself refuses what the registry refuses, so a section built without the text
    decode (a test, an override) cannot hold a value out of bounds either."""
    with pytest.raises(msgspec.ValidationError, match=">= 1"):
        msgspec.convert({"planner": {"segment_size": 0}}, Sections)
    with pytest.raises(msgspec.ValidationError, match="Invalid enum value"):
        msgspec.convert({"otel": {"exporter": "zipkin"}}, Sections)


def test_text_is_decoded_once_into_types() -> None:
    text = {
        "STREAMPROC_PLANNER_USAGE_ONLY": "off",
        "NATS_URL": "nats://a, nats://b",
        "STREAMPROC_PLANNER_DEBOUNCE_S": "2.5",
        "STREAMPROC_PLANNER_DEFAULT_RATE": "",
    }
    s = decode(text)
    assert s.planner.usage_only is False and s.planner.debounce_s == 2.5
    assert s.nats.url == ("nats://a", "nats://b")
    assert s.planner.default_rate == 50, "an empty variable is unset"
    built = planner_settings.from_sections(s)
    assert (built.usage_only, built.debounce_ms) == (False, 2500)
    assert planner_settings.from_sections(Sections()) == planner_settings.PlannerSettings()


def test_activate_refuses_a_bad_value_of_any_section(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "streamproc.toml"
    path.write_text("[planner]\ndefault_rate = 75\n")
    monkeypatch.setenv("STREAMPROC_PLANNER_SEGMENT_SIZE", "0")
    monkeypatch.setenv("STREAMPROC_IMPACT_WARM_ON_START", "maybe")
    with pytest.raises(ConfigFileError) as e:
        activate(str(path))
    assert {str(p) for p in e.value.problems} == {
        "planner.segment_size (env STREAMPROC_PLANNER_SEGMENT_SIZE): 0 is below the minimum 1",
        "impact.warm_on_start (env STREAMPROC_IMPACT_WARM_ON_START): expected true or false "
        "(1/0, true/false, yes/no, on/off), got 'maybe'",
    }
    assert str(e.value).startswith(f"{path}: 2 problem(s):")
    monkeypatch.delenv("STREAMPROC_PLANNER_SEGMENT_SIZE")
    monkeypatch.delenv("STREAMPROC_IMPACT_WARM_ON_START")
    conf = activate(str(path))
    assert conf.sections.planner.default_rate == 75
    assert conf.built(planner_settings.from_sections).default_rate == 75


def test_a_configuration_built_from_text_decodes_on_first_use() -> None:
    conf = config.Configuration(values={"STREAMPROC_PLANNER_SEGMENT_SIZE": "many"})
    with pytest.raises(config.ConfigError, match=r"planner\.segment_size"):
        conf.sections  # noqa: B018  # the property decodes
    assert config.Configuration().sections == Sections()


def test_a_gateway_with_a_bad_planner_value_does_not_start(tmp_path: Path) -> None:
    """A setting of a section the gateway does not use stops it too (before it connects),
    with the message ``config check`` prints."""
    path = tmp_path / "streamproc.toml"
    path.write_text('[gateway]\naudience = "x"\n')
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("STREAMPROC_") and k != "NATS_URL"}  # fmt: skip
    env["STREAMPROC_PLANNER_SEGMENT_SIZE"] = "0"
    proc = subprocess.run(
        [sys.executable, "-m", "streamproc.cli", "gateway", "--config", str(path),
         "--nats-url", "nats://127.0.0.1:1", "--data-dir", str(tmp_path / "d")],
        capture_output=True, text=True, timeout=60, env=env,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert f"{path}: 1 problem(s):" in proc.stderr
    assert (
        "planner.segment_size (env STREAMPROC_PLANNER_SEGMENT_SIZE): 0 is below the minimum 1"
        in proc.stderr
    )


def test_no_secret_shows_in_the_settings_repr() -> None:
    """Logging or printing the settings must not leak a password, key or token."""
    values = {k.env: f"s3cret-{i:02d}" for i, k in enumerate(KEYS) if k.secret and k.type == "str"}
    assert len(values) >= 8
    shown = repr(decode(values))
    assert "s3cret" not in shown, shown
    assert "password=<set>" in shown and "signing_key=<set>" in shown
    assert "token=None" in repr(Sections()), "an unset secret shows as unset"
