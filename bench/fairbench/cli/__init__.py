"""The ``fairbench`` command line: one module per subcommand, dispatched by ``main``.

Each runs on the control node or a GPU host and only parses, calls the packages below and prints."""
