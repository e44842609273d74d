"""Checks deploy/kubernetes/: each manifest against the Kubernetes API's schema
(kubernetes-validate, strict: unknown fields are errors), then the fields that matter to
serving: probes on /health, the metrics annotation, the port, a read-only model volume, and
the Service selecting the Deployment's pods.

    python manifests_check.py DIR
"""

import pathlib
import sys

import kubernetes_validate
import yaml

folder = pathlib.Path(sys.argv[1])
docs = {}
for path in sorted(folder.glob("*.yaml")):
    if path.name == "kustomization.yaml":
        continue
    for doc in yaml.safe_load_all(path.read_text()):
        kubernetes_validate.validate(doc, "1.30", strict=True)
        docs[doc["kind"]] = doc
        print(f"ok: {path.name} ({doc['kind']}) matches the schema")

dep = docs["Deployment"]
pod = dep["spec"]["template"]
c = pod["spec"]["containers"][0]
assert c["readinessProbe"]["httpGet"]["path"] == "/health", c["readinessProbe"]
assert c["livenessProbe"]["httpGet"]["path"] == "/health", c["livenessProbe"]
notes = pod["metadata"]["annotations"]
assert notes["prometheus.io/scrape"] == "true" and notes["prometheus.io/path"] == "/metrics"
assert notes["prometheus.io/port"] == str(c["ports"][0]["containerPort"])
assert "serve" in c["args"] and "--host=0.0.0.0" in c["args"], c["args"]
assert all(m.get("readOnly") for m in c["volumeMounts"]), c["volumeMounts"]
svc = docs["Service"]
labels = pod["metadata"]["labels"]
assert all(labels.get(k) == v for k, v in svc["spec"]["selector"].items())
assert svc["spec"]["ports"][0]["targetPort"] == c["ports"][0]["name"]
print("ok: probes, metrics annotation, ports, volume and selector")
