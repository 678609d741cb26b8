"""Campaign files: read, checked against every rule and SGLang's flag table, expanded into typed configs.

Runs on the control node (``fairbench validate``, the campaign playbook); it starts nothing."""
