"""``voiceserver serve`` runs the server (``voiceserver ray`` runs it on Ray Serve);
``voiceserver say`` is the client's CLI; ``voiceserver onboard DIR`` turns a checkpoint
into a config that serves it."""

from __future__ import annotations

import argparse
import logging
import sys

from voiceserver.server_args import add_server_arguments, configs_from_args


def serve(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="voiceserver serve", description="Run the voice server.")
    add_server_arguments(parser)
    args = parser.parse_args(argv)

    from voiceserver.app import create_app
    from voiceserver.server import build_server

    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    server, model_config = configs_from_args(args)
    app = create_app(server, model_config)
    build_server(app, server, args.log_level).run()


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(
            "usage: voiceserver {serve,ray,say,bridge,onboard} ...\n"
            "  serve    run the server\n"
            "  ray      run the server as Ray Serve replicas, one per GPU of a Ray cluster\n"
            "  say      synthesize text through a running server\n"
            "  bridge   speak an LLM's streamed reply (OpenAI-compatible chat completions)\n"
            "  onboard  recognise a checkpoint, size it for a GPU and write its config"
        )
        return
    command, rest = argv[0], argv[1:]
    if command == "serve":
        serve(rest)
    elif command == "ray":
        from voiceserver.ray_serve import main as ray_main

        ray_main(rest)
    elif command == "say":
        from voiceclient.say import main as say_main

        say_main(rest)
    elif command == "bridge":
        from voiceclient.bridge import main as bridge_main

        bridge_main(rest)
    elif command == "onboard":
        from voiceserver.onboard import main as onboard_main

        raise SystemExit(onboard_main(rest))
    else:
        raise SystemExit(
            f"unknown command {command!r}; use serve, ray, say or bridge (or onboard DIR to "
            "make a config for a checkpoint)"
        )


if __name__ == "__main__":
    main()
