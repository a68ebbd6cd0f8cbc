"""labkit's JupyterHub: the course on one server (spawner, roster, hand-in, grading service).

Runs inside the hub's own virtual environment (jupyterhub and friends), never imports ``labkit``:
the grader is called as a black box (``python -m labkit.grading grade``) from the course checkout.
"""
