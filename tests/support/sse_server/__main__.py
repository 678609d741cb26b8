"""``python -m tests.support.sse_server [flags]`` from the repository root."""

from tests.support.sse_server.cli import main

if __name__ == "__main__":
    main()
