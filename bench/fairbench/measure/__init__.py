"""The measurement core that runs on a GPU host beside the server: client, sweep, metrics, results files.

It needs aiohttp, orjson, prometheus_client and PyYAML only (pynvml for energy, when installed)."""
