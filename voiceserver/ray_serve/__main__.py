"""``python -m voiceserver.ray_serve ARGS`` is ``voiceserver ray ARGS``."""

import sys

from voiceserver.ray_serve import main

main(sys.argv[1:])
