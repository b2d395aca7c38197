"""What pip says while it resolves a job's requirements.txt in a container of the job's image
(`emulator.backend.index_container`, whose script marks its own lines), as the user reads it: the
markers as progress lines, some of them warnings, and a failure in one phrase naming the requirement
and the Python, with pip's last lines. Pure: reads lines, never talks to Docker, so the wheelhouse's
cache (emulator/run/wheelhouse.py) reads WARNING without loading docker-py.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from emulator.errors import WheelhouseError

#: How a progress line that is a warning starts (`emulator.run.wheelhouse.ensure` gives it to its `warn`).
WARNING = "warning: "
TAIL_LINES = 20
Progress = Callable[[str], None]


class ResolveLines:
    """The resolving script's output (`emulator.backend.index_container`) as the user reads it: its
    markers become progress lines (a warning starts with WARNING), pip's own lines are shown indented
    and kept for a failure's message (only those of the last resolution: what failed)."""

    def __init__(self, image: str, progress: Progress) -> None:
        self.image = image
        self.progress = progress
        self.python = "?"  # the image's, as the script says
        self.named: str | None = None  # the Python resolved as for, when asked
        self.lines: list[str] = []

    def __call__(self, text: str) -> None:
        marker, _, rest = text.partition(" ")
        said = self._said(marker, rest.split())
        if said is None:
            self.lines.append(text)
            self.progress(f"  {text}")
        elif said:
            self.progress(said)

    def _said(self, marker: str, words: list[str]) -> str | None:
        """The line a marker of the script says ("" for none), None for a line of pip's."""
        python, named = self.python, self.named
        instead = f"resolved for Python {python}, the image's, instead"
        if marker == "PYTHON" and words:
            self.python = words[0]
            return f"requirements.txt: pip of {self.image} (Python {self.python}) decides what the image lacks"
        if marker == "ASFOR" and words:
            self.named = words[0]
            return (f"requirements.txt: pip chooses the versions as for Python {self.named}, the job's (the image "
                    f"runs {python}), keeping {', '.join(words[1:]) or 'what the image has'}")
        if marker == "ASFOR_LAYER_MOVES":
            return (f"requirements.txt: with {', '.join(words)} kept, pip finds no resolution for Python {named}; "
                    "it lets them move, as pip on the service upgrades what the file asks to")
        if marker == "ASFOR_CHOSEN":
            return (f"requirements.txt: for Python {named} pip chooses {', '.join(words)}" if words else
                    f"requirements.txt: for Python {named} the image already has everything it asks for")
        if marker == "ASFOR_NONE":
            return (f"{WARNING}requirements.txt: pip finds no resolution for Python {named} from wheels alone "
                    f"(its lines above say why); {instead}")
        if marker == "ASFOR_NOT_HERE" and len(words) == 2:
            name = words[0].split("==")[0]
            then = (f"{name}=={words[1]}, pip's choice for Python {python}, instead" if words[1] != "-" else
                    f"Python {python} needs no {name}")
            return (f"{WARNING}requirements.txt: {words[0]}, pip's choice for Python {named}, does not install on "
                    f"Python {python}: {then}")
        if marker == "ASFOR_CONFLICT":
            return (f"{WARNING}requirements.txt: the versions pip chose for Python {named} do not resolve together "
                    f"on Python {python} (its lines above say why); {instead}")
        if marker == "ASFOR_BUILD_FAILED":
            return (f"{WARNING}requirements.txt: a version pip chose for Python {named} does not build on Python "
                    f"{python} (its lines above say which); {instead}")
        if marker == "RESOLVE":
            self.lines.clear()
            return ""
        if marker == "SDIST" and words:
            chosen = f" (pip's choice for Python {named})" if words[1:] == ["as-for"] else ""
            return (f"requirements.txt: {words[0]}{chosen} has no wheel for Python {python}: pip builds it from its "
                    "source package (this can take minutes)")
        if marker == "FETCH" and words and words[0].isdigit():
            count = int(words[0])
            return (f"requirements.txt: {count} package(s) to fetch" if count else
                    "requirements.txt: the image already has everything it asks for")
        return None


def pip_failure(lines: Sequence[str], python: str) -> str:
    """What pip's output says went wrong, in one phrase naming the requirement and the Python: no
    release for this Python, not found, a conflict, a source package that does not build, no index."""
    text = "\n".join(lines)
    # The resolver's own probe of the index (emulator.backend.index_container), after pip failed.
    unreachable = re.search(r"^INDEX_UNREACHABLE (.*)$", text, re.MULTILINE)
    if unreachable:
        return f"the package index could not be reached from the image's container: {unreachable[1][:300]}"
    missing = re.search(r"No matching distribution found for (\S+)", text)
    ignored = re.search(r"Ignored the following versions that require a different python version: (.*)", text)
    if missing and ignored:
        return (f"{missing[1]}: no release of it installs on Python {python} (releases for other Pythons: "
                f"{ignored[1].strip()[:200]})")
    network = re.search(r"(Could not fetch URL .*|.*(?:Max retries exceeded|Temporary failure in name resolution|"
                        r"Network is unreachable|Connection refused|ProxyError|SSLError|"
                        r"CERTIFICATE_VERIFY_FAILED).*)", text)
    if missing and network:
        return f"the package index could not be reached from the image's container ({network[0].strip()[:200]})"
    if missing:
        return f"{missing[1]}: not found on the package index for Python {python} (no such package or version)"
    if "ResolutionImpossible" in text or "conflict is caused by" in text:
        cause = text.split("The conflict is caused by:", 1)[-1].split("\n\n", 1)[0] if "conflict is caused by" in text \
            else ""
        causes = "; ".join(line.strip() for line in cause.splitlines() if line.strip())[:400]
        return f"conflicting requirements for Python {python}" + (f": {causes}" if causes else "")
    built = re.search(r"(?:Failed to build|Failed building wheel for|Could not build wheels for) ([\w.-]+)", text)
    if built:
        return (f"{built[1]}: no wheel of it for Python {python}, and its source package does not build "
                "there (see pip's lines)")
    if network:
        return f"the package index could not be reached from the image's container ({network[0].strip()[:200]})"
    error = next((line.strip() for line in reversed(lines) if "ERROR" in line), None)
    return error or f"pip failed on Python {python}"


def failure(shown: str, lines: Sequence[str], python: str, exit_code: int) -> WheelhouseError:
    """The error for a pip that failed resolving `shown` (a requirements.txt), with pip's last lines."""
    tail = list(lines)[-TAIL_LINES:]
    return WheelhouseError(
        f"requirements.txt: {pip_failure(lines, python)} ({shown}, pip exit code {exit_code}); pip's last lines:\n"
        + "\n".join(f"    {line}" for line in tail),
        hint="fix that requirement for the image's Python, or pin one that has a wheel for it; no container "
        "of the job was started",
    )
