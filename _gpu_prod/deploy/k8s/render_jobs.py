"""Fan grading out as Kubernetes Jobs: one Job per student from grading-job.yaml (YAML on stdout).

``python deploy/k8s/render_jobs.py ASSIGNMENT STUDENT...`` prints the NetworkPolicy once and one
Job per student (name, labels and the hand-in subPath rewritten), ready for ``kubectl apply -f -``.
"""

from __future__ import annotations

import copy
import re
import sys
from pathlib import Path

import yaml

TEMPLATE = Path(__file__).with_name("grading-job.yaml")
NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,40}$")     # a DNS label part (roster names use no '_')


def jobs(assignment: str, students: list[str]) -> list[dict]:
    """The policy and one Job per student (ValueError for a name Kubernetes would refuse)."""
    docs = list(yaml.safe_load_all(TEMPLATE.read_text()))
    policy = [d for d in docs if d["kind"] != "Job"]
    template = next(d for d in docs if d["kind"] == "Job")
    out = []
    for student in students:
        if not NAME.match(student) or not NAME.match(assignment):
            raise ValueError(f"not usable in a Kubernetes name: {assignment!r}/{student!r}")
        job = copy.deepcopy(template)
        job["metadata"]["name"] = f"labkit-grade-{assignment}-{student}"
        job["metadata"]["labels"].update({"labkit/assignment": assignment, "labkit/student": student})
        mounts = {m["name"]: m for m in job["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]}
        mounts["handin"].update(mountPath=f"/handin/{student}", subPath=f"{assignment}/{student}/latest")
        mounts["out"]["subPath"] = f"{assignment}/{student}"
        out.append(job)
    return policy + out


if __name__ == "__main__":
    print(yaml.safe_dump_all(jobs(sys.argv[1], sys.argv[2:]), sort_keys=False), end="")
