"""The environment the kit reads is read in config.py only and documented in docs/getting-started.md."""

import re
from pathlib import Path

from launchlab import config

ROOT = Path(__file__).resolve().parents[1]


def test_the_docs_document_every_variable_config_reads():
    page = (ROOT / "docs" / "getting-started.md").read_text()
    table = page.split("## Configuration", 1)[1].split("\n## ", 1)[0]
    assert set(re.findall(r"`(LAUNCHLAB_[A-Z_]+)`", table)) == set(config.VARIABLES)


def test_no_other_module_reads_a_launchlab_variable():
    readers = [p.relative_to(ROOT) for p in (ROOT / "lib" / "launchlab").rglob("*.py")
               if p.name != "config.py" and re.search(r"environ(?:\.get)?\(?\[?[\"']LAUNCHLAB_", p.read_text())]
    assert readers == []
    source = (ROOT / "lib/launchlab/config.py").read_text()
    assert all(name in source for name in config.VARIABLES)
