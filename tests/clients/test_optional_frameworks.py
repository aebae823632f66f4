"""The client library and the bridge load without the agent frameworks."""

from __future__ import annotations

import subprocess
import sys

CHECK = """
import sys
import voiceclient, voiceclient.bridge, voiceclient.say, voiceclient.shared_connection
loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("livekit", "pipecat"))
print(",".join(loaded))
"""


def test_voiceclient_imports_no_framework() -> None:
    out = subprocess.run(
        [sys.executable, "-c", CHECK], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == ""
