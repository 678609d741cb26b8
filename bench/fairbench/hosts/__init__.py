"""What a GPU host reports about itself for Ansible: GPU facts, server health, the server's journal.

The Ansible modules call into ``ansible_support``; the rest runs on the host in fairbench's venv."""
