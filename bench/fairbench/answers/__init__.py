"""What a config's server answers, beside how fast: greedy probes compared token by token across configs,
and accuracy tasks with known answers.

Run by each campaign job on its host, between the server's health and its sweep (``answers.check``, into
the job's ``answers/`` files), and read on the control node by the report (``answers.compare``,
``answers.scores``). The plan each job follows is campaign.json's ``answers`` (``answers.plan``).
"""
