"""llama.cpp's ``llama-server`` as a real inference engine in the loop (docs/engines.md, "A real
engine in the loop"): finding the binary ``scripts/install-llama-server.sh`` builds
(:mod:`xtask.llamacpp.assets`) and writing the tiny seeded model it serves
(:mod:`xtask.llamacpp.model`). The server's command line is :func:`xtask.components.llama_server`;
the local runtime starts it for a provider an env file declares with ``engine: {kind: llamacpp}``.

Dev and test tooling, so it lives in ``xtask/`` (the tool) rather than ``agn/`` (the system): AGN
itself only ever reads an engine over HTTP (:mod:`agn.engines`).
"""
