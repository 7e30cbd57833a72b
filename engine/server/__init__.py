"""The serving engine: KServe v2 HTTP and a binary TCP protocol in front of a
per-model dynamic batcher. Entry point: `ai-engine serve --config FILE`
(engine.commands.serve) -> engine.server.server.run_server."""
