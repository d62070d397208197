"""examples/tour.py run once for the suite: the README's first command, whose output holds
every example's output under its banner. ``tests/conftest.py``'s session fixture ``tour``
runs it; ``test_tour`` checks the whole run, ``test_examples`` and ``test_ddp`` check their
example's section (each example ran once, not once in the tour and again on its own).
"""
import dataclasses
import os
import re
import subprocess
import sys
from typing import Dict

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TIMEOUT_S = 600                 # the six examples' own limits were 120-300 s each
_BANNER = re.compile(r"^\[\d+/\d+\] examples/(\S+\.py): ")


@dataclasses.dataclass
class Tour:
    returncode: int
    stdout: str
    stderr: str
    sections: Dict[str, str]    # "deploy.py" -> the lines printed under its banner

    def section(self, name: str) -> str:
        """The output of examples/``name``; fails with the tour's error when it did not run."""
        ran = list(self.sections)
        if self.returncode != 0 and (name not in ran or name == ran[-1]):   # it failed there
            raise AssertionError(f"the tour failed in or before {name}:\n"
                                 f"{self.stdout[-2000:]}\n{self.stderr[-4000:]}")
        assert name in ran, f"the tour ran no {name}: {self.stdout[-2000:]}"
        return self.sections[name]


def sections(stdout: str) -> Dict[str, str]:
    found, name, lines = {}, None, []
    for line in stdout.splitlines(keepends=True):
        banner = _BANNER.match(line)
        if banner:
            if name:
                found[name] = "".join(lines)
            name, lines = banner.group(1), []
        elif name and not (line.startswith("=" * 78) or line.startswith("tour complete:")):
            lines.append(line)
    if name:
        found[name] = "".join(lines)
    return found


def run_tour() -> Tour:
    env = dict(os.environ, PYTHONIOENCODING="utf-8")
    env.pop("PYTHONPATH", None)             # the examples must find the package themselves
    done = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "tour.py")],
                          capture_output=True, text=True, encoding="utf-8", env=env,
                          timeout=TIMEOUT_S, cwd=ROOT)
    return Tour(done.returncode, done.stdout, done.stderr, sections(done.stdout))
