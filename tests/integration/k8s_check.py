#!/usr/bin/python3
"""k8s_check.py K8S_DIR ROOT OUT - checks deploy/k8s's manifests against
what the workers need, then writes what test_k8s.sh runs: the pods of the
Indexed Job as Kubernetes would make them, with every path the pod sees
moved under ROOT (the only change).

Checks (a failure prints the manifest's field and exits 1):
- hora.yaml holds one Service, one ConfigMap and one Job; the Service is
  headless (clusterIP None), publishes not-ready addresses, and selects the
  Job's pod labels; the pod template's subdomain is the Service's name;
- the Job is Indexed, completions = parallelism = the workers of the
  ConfigMap's cluster file, restartPolicy Never with backoffLimitPerIndex;
- the cluster file names node i as <job>-<i>.<service> with one worker
  each, the seed as <job>-0.<service>:<port_base + 1>, a secret_file inside
  the Secret's mount, train.elastic on;
- no environment variable of the pod comes from a Secret or names one;
  the Secret is a volume of mode 0440 that the container's user reads
  (runAsUser, and fsGroup = runAsGroup: the kubelet makes it root:fsGroup);
- gpu/'s patch names the Job and its worker container and asks for
  nvidia.com/gpu.
Writes OUT/pod-<i>.env (NAME=VALUE lines: the manifest's env and
JOB_COMPLETION_INDEX, HOSTNAME), OUT/pod-<i>.cmd (the command, one word a
line), OUT/hosts (the names every pod resolves) and OUT/user (the pods'
runAsUser, runAsGroup and fsGroup), and prints the number
of pods. ROOT gets the mounts: ROOT/etc/hora/cluster.yaml (the ConfigMap's,
its paths moved under ROOT), ROOT/etc/hora/secret/ (the caller's secret
goes there), ROOT/data (the caller links the data set).
Needs PyYAML (python3-yaml, which Debian's python3-torch depends on).
"""
import os
import sys

import yaml


def fail(what):
    sys.exit("k8s_check: " + what)


def one(docs, kind):
    d = [x for x in docs if x.get("kind") == kind]
    if len(d) != 1:
        fail("hora.yaml: want exactly one %s, found %d" % (kind, len(d)))
    return d[0]


def check_service(svc, pod_labels):
    s = svc["spec"]
    if s.get("clusterIP") != "None":
        fail("Service %s: spec.clusterIP must be None (headless)" % svc["metadata"]["name"])
    if s.get("publishNotReadyAddresses") is not True:
        fail("Service: spec.publishNotReadyAddresses must be true (the pods have no readiness probe)")
    for k, v in s.get("selector", {}).items():
        if pod_labels.get(k) != v:
            fail("Service: spec.selector %s=%s does not select the Job's pods %s" % (k, v, pod_labels))


def check_job(job, svc_name, workers):
    s, pod = job["spec"], job["spec"]["template"]["spec"]
    if s.get("completionMode") != "Indexed":
        fail("Job: spec.completionMode must be Indexed (JOB_COMPLETION_INDEX is the worker index)")
    if s.get("completions") != workers or s.get("parallelism") != workers:
        fail("Job: spec.completions (%s) and parallelism (%s) must be the cluster file's %d workers"
             % (s.get("completions"), s.get("parallelism"), workers))
    if pod.get("restartPolicy") != "Never" or not s.get("backoffLimitPerIndex"):
        fail("Job: restartPolicy Never with backoffLimitPerIndex (a failed pod's replacement rejoins)")
    if pod.get("subdomain") != svc_name:
        fail("Job: spec.template.spec.subdomain (%s) must be the Service's name %s"
             % (pod.get("subdomain"), svc_name))
    c = [x for x in pod["containers"] if x["name"] == "worker"]
    if len(c) != 1:
        fail("Job: want one container named worker")
    return pod, c[0]


def check_cluster(cl, job_name, svc_name, secret_mount):
    nodes = cl["cluster"]["nodes"]
    for i, n in enumerate(nodes):
        want = "%s-%d.%s" % (job_name, i, svc_name)
        if n.get("host") != want or n.get("workers") != 1:
            fail("ConfigMap cluster.yaml: cluster.nodes[%d] must be {host: %s, workers: 1} (got %s)"
                 % (i, want, n))
    seed = "%s-0.%s:%d" % (job_name, svc_name, cl["cluster"].get("port_base", 29500) + 1)
    if cl["cluster"].get("seeds") != [seed]:
        fail("ConfigMap cluster.yaml: cluster.seeds must be [%s] (got %s)" % (seed, cl["cluster"].get("seeds")))
    sf = cl["cluster"].get("secret_file", "")
    if not sf.startswith(secret_mount.rstrip("/") + "/"):
        fail("ConfigMap cluster.yaml: cluster.secret_file %r must be in the Secret's mount %s" % (sf, secret_mount))
    if not cl.get("train", {}).get("elastic"):
        fail("ConfigMap cluster.yaml: train.elastic must be on (replaced pods rejoin)")
    return len(nodes)


def check_secret(pod, c):
    for e in c.get("env", []):
        if "secretKeyRef" in str(e.get("valueFrom", "")) or "SECRET" in e["name"].upper():
            fail("Job: env %s: the secret must be a file (a Secret volume), never an env var" % e["name"])
    if c.get("envFrom"):
        fail("Job: envFrom: the environment must not come from a Secret or ConfigMap wholesale")
    vols = {v["name"]: v for v in pod["volumes"]}
    sec = [m for m in c["volumeMounts"] if "secret" in vols[m["name"]]]
    if len(sec) != 1 or vols[sec[0]["name"]]["secret"].get("defaultMode") != 0o440:
        fail("Job: want one Secret volume mounted, defaultMode 0440 (its owner is root, its group fsGroup)")
    sc = {**pod.get("securityContext", {}), **c.get("securityContext", {})}
    if not sc.get("runAsUser") or sc.get("fsGroup") is None or sc.get("fsGroup") != sc.get("runAsGroup"):
        fail("Job: the secret file (root:fsGroup, 0440) must be readable by the container's user: "
             "set runAsUser, and fsGroup = runAsGroup (got %s)" % sc)
    return vols, sec[0]["mountPath"], sc


def check_gpu(d):
    k = yaml.safe_load(open(os.path.join(d, "gpu", "kustomization.yaml")))
    if k["resources"] != ["../hora.yaml"]:
        fail("gpu/kustomization.yaml: resources must be ../hora.yaml")
    for p in k["patches"]:
        patch = yaml.safe_load(open(os.path.join(d, "gpu", p["path"])))
        cs = patch["spec"]["template"]["spec"]["containers"]
        if p["target"] != {"kind": "Job", "name": "hora"} or patch["metadata"]["name"] != "hora" or \
                [c["name"] for c in cs] != ["worker"] or cs[0]["resources"]["limits"].get("nvidia.com/gpu") != 1:
            fail("gpu/%s: must patch Job hora's container worker with limits nvidia.com/gpu: 1" % p["path"])


def write_pods(out, root, cl_text, mounts, vols, job, svc, c, n):
    os.makedirs(os.path.join(root, "etc/hora/secret"), exist_ok=True)
    for m in mounts:  # every absolute path the pod sees moves under ROOT
        cl_text = cl_text.replace(m, root + m)
    for m in mounts:
        if "configMap" in vols[m_name(c, m)]:
            with open(root + m, "w") as f:
                f.write(cl_text)
    with open(os.path.join(out, "hosts"), "w") as f:
        for i in range(n):
            f.write("%s-%d.%s %s-%d.%s.default.svc.cluster.local\n" % (job, i, svc, job, i, svc))
    for i in range(n):
        with open(os.path.join(out, "pod-%d.env" % i), "w") as f:
            for e in c.get("env", []):
                f.write("%s=%s\n" % (e["name"], e["value"]))
            f.write("JOB_COMPLETION_INDEX=%d\nHOSTNAME=%s-%d\n" % (i, job, i))
        with open(os.path.join(out, "pod-%d.cmd" % i), "w") as f:
            for w in c["command"] + c.get("args", []):
                for m in mounts:
                    w = w.replace(m, root + m) if w.startswith(m) else w
                f.write(w + "\n")


def m_name(c, path):
    return [m["name"] for m in c["volumeMounts"] if m["mountPath"] == path][0]


def main(d, root, out):
    docs = list(yaml.safe_load_all(open(os.path.join(d, "hora.yaml"))))
    svc, cm, job = one(docs, "Service"), one(docs, "ConfigMap"), one(docs, "Job")
    svc_name, job_name = svc["metadata"]["name"], job["metadata"]["name"]
    cl_text = cm["data"]["cluster.yaml"]
    cl = yaml.safe_load(cl_text)
    workers = sum(n["workers"] for n in cl["cluster"]["nodes"])
    pod, c = check_job(job, svc_name, workers)
    check_service(svc, job["spec"]["template"]["metadata"]["labels"])
    vols, secret_mount, sc = check_secret(pod, c)
    with open(os.path.join(out, "user"), "w") as f:  # the pods' uid, gid and fsGroup
        f.write("%d %d %d\n" % (sc["runAsUser"], sc["runAsGroup"], sc["fsGroup"]))
    n = check_cluster(cl, job_name, svc_name, secret_mount)
    cfg = [m for m in c["volumeMounts"] if "configMap" in vols[m["name"]]]
    if len(cfg) != 1 or vols[cfg[0]["name"]]["configMap"]["name"] != cm["metadata"]["name"] or \
            cfg[0].get("subPath") != "cluster.yaml" or cfg[0]["mountPath"] not in c["command"]:
        fail("Job: the ConfigMap's cluster.yaml must be mounted (subPath) at the path the command reads")
    check_gpu(d)
    write_pods(out, root, cl_text, [m["mountPath"] for m in c["volumeMounts"]], vols, job_name, svc_name, c, n)
    print(n)


if __name__ == "__main__":
    main(*sys.argv[1:4])
