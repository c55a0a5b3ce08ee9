"""The documentation builds without warnings (MkDocs, strict mode)."""
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_docs_build_strict(tmp_path):
    pytest.importorskip("mkdocs")
    r = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q",
                        "--site-dir", str(tmp_path / "site")], cwd=ROOT, capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert (tmp_path / "site" / "index.html").exists()


def test_every_docs_page_is_in_the_nav():
    import yaml
    nav = yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"]
    listed = {list(item.values())[0] for item in nav}
    pages = {p.name for p in (ROOT / "docs").glob("*.md")}
    assert pages <= listed, pages - listed


def test_getting_started_code_runs_as_written(tmp_path, monkeypatch):
    """The Python blocks of docs/getting_started.md, executed in order, work."""
    import re
    text = (ROOT / "docs" / "getting_started.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert len(blocks) >= 2
    monkeypatch.chdir(tmp_path)
    ns = {}
    for code in blocks:
        exec(compile(code, "getting_started.md", "exec"), ns)
    assert ns["res"].success
    assert abs(ns["res"].estimates["p1"] - 1.0) < 0.1
    assert set(ns["table"].index) >= {"simultaneous", "reduced_space"}
