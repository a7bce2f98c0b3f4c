"""The KubeRay manifest in docs/fleet.md builds the fleet it describes: its `import_path`
is importable, and its `args.argv` parse into the FleetSpec that `fleet up` would make."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest
import yaml

from llamay.fleet.service import spec_from_argv

DOC = Path(__file__).resolve().parents[2] / "docs" / "fleet.md"


def manifest_app() -> dict:
    text = DOC.read_text()
    (block,) = [b for b in re.findall(r"```yaml\n(.*?)```", text, flags=re.S) if "RayService" in b]
    service = next(d for d in yaml.safe_load_all(block) if d and d.get("kind") == "RayService")
    (app,) = yaml.safe_load(service["spec"]["serveConfigV2"])["applications"]
    return app


def test_the_manifest_names_a_builder_that_builds_its_fleet(tmp_path: Path, tiny_model_path: Path) -> None:
    app = manifest_app()
    module, _, name = app["import_path"].partition(":")
    builder = getattr(importlib.import_module(module), name)
    assert callable(builder)
    # The manifest's flags, with its paths pointed at this machine's files.
    argv = list(app["args"]["argv"])
    paths = {"/models/model.gguf": str(tiny_model_path), "/shared/llamay": str(tmp_path / "state")}
    keys = tmp_path / "keys.json"
    keys.write_text('{"keys": [{"key": "k-admin", "principal": "root", "role": "admin"}]}')
    paths["/shared/keys.json"] = str(keys)
    spec = spec_from_argv([paths.get(a, a) for a in argv])
    assert spec.replicas == int(argv[argv.index("-replicas") + 1])
    assert spec.ingresses == int(argv[argv.index("-ingresses") + 1])
    assert spec.state_dir == str((tmp_path / "state").resolve()) and spec.durable
    assert (spec.host, spec.port) == ("0.0.0.0", 11435)
    assert spec.server.keys is not None
    bound = builder({"argv": [paths.get(a, a) for a in argv]})
    assert type(bound).__name__ == "Application"


def test_bad_manifest_args_are_refused_by_name() -> None:
    with pytest.raises(ValueError, match="argv"):
        spec_from_argv("-replicas 2")  # type: ignore[arg-type]
    with pytest.raises(SystemExit):
        spec_from_argv(["-replicas", "two"])
