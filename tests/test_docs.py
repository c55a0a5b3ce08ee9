"""The documentation builds without warnings (MkDocs, strict mode)."""
import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _mkdocs_build(site_dir):
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict",
                           "--site-dir", str(site_dir)], cwd=ROOT, capture_output=True,
                          text=True, env=env)


@pytest.mark.extras
def test_docs_build_strict_with_an_api_page_for_every_public_name(tmp_path):
    """``mkdocs build --strict`` (rendered maths, API reference, cross references):
    no warning (the log is read, not hidden), and every public name of every API unit
    has its entry."""
    for name in ("mkdocs", "mkdocstrings", "mkdocstrings_handlers.python", "pymdownx",
                 "material"):
        pytest.importorskip(name)
    site = tmp_path / "site"
    r = _mkdocs_build(site)
    log = r.stdout + r.stderr
    assert r.returncode == 0, log
    warned = [line for line in log.splitlines() if "WARNING" in line]
    assert not warned, "\n".join(warned)
    assert (site / "index.html").exists()
    sys.path.insert(0, str(ROOT / "docs_tools"))
    try:
        from rst_roles import api_units, documented_path
    finally:
        sys.path.pop(0)
    missing = []
    for unit in api_units():
        page = site / "api" / unit / "index.html"
        assert page.exists(), f"no API page docs/api/{unit}.md"
        html = page.read_text()
        for name in importlib.import_module(f"pyomo_odeest.{unit}").__all__:
            ident = documented_path(f"pyomo_odeest.{unit}", name)
            if f'id="{ident}"' not in html:
                missing.append(ident)
    assert not missing, missing
    index = (site / "api" / "index.html").read_text()
    import pyomo_odeest
    absent = [n for n in pyomo_odeest.__all__ if n != "__version__" and f"<code>{n}</code>" not in index]
    assert not absent, (f"top-level names missing from docs/api/index.md: {absent} "
                        "(regenerate it: python docs_tools/api_index.py)")
    # maths is rendered by MathJax from the arithmatex spans, with the MathJax shipped in
    # docs/ (the site renders offline)
    bib = (site / "bibliography" / "index.html").read_text()
    assert 'class="arithmatex"' in bib
    assert 'src="../javascripts/mathjax/tex-svg-full.js"' in bib
    assert (site / "javascripts" / "mathjax" / "tex-svg-full.js").stat().st_size > 1_000_000


def test_docs_load_no_script_from_the_network():
    """Every script of the site is a file of docs/ (maths render offline)."""
    import yaml
    conf = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    scripts = conf.get("extra_javascript", [])
    remote = [s for s in scripts if "://" in str(s) or str(s).startswith("//")]
    assert not remote, remote
    missing = [s for s in scripts if not (ROOT / "docs" / s).is_file()]
    assert not missing, missing


def _nav_pages(nav):
    for item in nav:
        value = list(item.values())[0] if isinstance(item, dict) else item
        if isinstance(value, list):
            yield from _nav_pages(value)
        else:
            yield value


def test_every_docs_page_is_in_the_nav():
    import yaml
    nav = yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"]
    listed = set(_nav_pages(nav))
    pages = {str(p.relative_to(ROOT / "docs")) for p in (ROOT / "docs").rglob("*.md")}
    assert pages <= listed, pages - listed


def test_no_file_numbers_for_the_papers():
    """The papers are cited by their keys, never as 'seed 00N' (docs, README, code)."""
    import re
    pat = re.compile(r"seed ?0\d", re.I)
    files = [ROOT / "README.md", *(ROOT / "docs").rglob("*.md"),
             *(ROOT / "pyomo_odeest").rglob("*.py")]
    bad = [f"{f.relative_to(ROOT)}:{i}" for f in files
           for i, line in enumerate(f.read_text().splitlines(), 1) if pat.search(line)]
    assert not bad, bad


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


def test_architecture_own_approach_code_runs_as_written():
    """The Python block of docs/architecture.md, section "An approach of your own"."""
    import re
    text = (ROOT / "docs" / "architecture.md").read_text()
    section = text.split("### An approach of your own", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    assert len(blocks) == 1
    ns = {}
    exec(compile(blocks[0], "architecture.md", "exec"), ns)
    res, res2 = ns["res"], ns["res2"]
    assert res.success and res2.success
    assert res.approach == res2.approach == "reduced_space_lbfgs"
    assert res.method.startswith("scipy-L-BFGS-B") and res2.method.startswith("ipopt/")
