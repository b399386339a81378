#!/usr/bin/env python3
"""check-manifests: every document of deploy/k8s/*.yaml against the Kubernetes JSON schemas
(kubernetes-validate, strict: unknown fields are errors) for the Kubernetes versions we claim,
then the operating rules of issue 18:
  - every namespaced object's namespace is created by the manifests;
  - pods in a namespace that enforces Pod Security "baseline" pass the baseline checks
    (no hostPath, host namespaces, privileged, extra capabilities, host ports, unconfined
    seccomp/AppArmor, unsafe sysctls); the DaemonSet exception must FAIL them (so this check
    can fail, and the exception is where the comments say);
  - one Kafka address: every brokers value in the manifests is the same, and the daemons take
    it from the fleetprof-kafka ConfigMap;
  - every container has cpu and memory requests and limits; every long-running container
    (containers, and init containers with restartPolicy Always) has liveness and readiness
    probes;
  - a pod annotated prometheus.io/scrape serves that port off loopback (http-listen/http-addr
    not 127.x in its config);
  - the aggregator's API token comes from a Secret defined here.
Usage: check-manifests.py DIR [K8S_VERSION...]   exit 0 when all pass."""
import glob
import os
import re
import sys

import kubernetes_validate
import yaml

failures = []


def check(ok, what):
    print(("ok: " if ok else "FAIL: ") + what)
    if not ok:
        failures.append(what)


def pod_spec(doc):
    k = doc.get("kind")
    if k == "Pod":
        return doc["spec"], doc.get("metadata", {})
    if k in ("Deployment", "DaemonSet", "StatefulSet", "ReplicaSet", "Job"):
        t = doc["spec"]["template"]
        return t["spec"], t.get("metadata", {})
    if k == "CronJob":
        t = doc["spec"]["jobTemplate"]["spec"]["template"]
        return t["spec"], t.get("metadata", {})
    return None, None


BASELINE_CAPS = {"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
                 "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"}
SAFE_SYSCTLS = {"kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range",
                "net.ipv4.ip_unprivileged_port_start", "net.ipv4.tcp_syncookies",
                "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
                "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout",
                "net.ipv4.tcp_keepalive_intvl", "net.ipv4.tcp_keepalive_probes"}


def baseline_violations(spec, meta):
    """The Pod Security Standards' baseline level, as the admission controller checks it."""
    v = []
    for f in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(f):
            v.append(f)
    for vol in spec.get("volumes", []):
        if "hostPath" in vol:
            v.append("hostPath volume " + vol["name"])
    psc = spec.get("securityContext", {})
    for s in psc.get("sysctls", []):
        if s["name"] not in SAFE_SYSCTLS:
            v.append("sysctl " + s["name"])
    if psc.get("seccompProfile", {}).get("type") == "Unconfined":
        v.append("pod seccomp Unconfined")
    if psc.get("seLinuxOptions", {}).get("user") or psc.get("seLinuxOptions", {}).get("role"):
        v.append("pod seLinux user/role")
    for k, val in (meta.get("annotations") or {}).items():
        if k.startswith("container.apparmor.security.beta.kubernetes.io/") and val == "unconfined":
            v.append("apparmor unconfined")
    for c in spec.get("containers", []) + spec.get("initContainers", []):
        sc = c.get("securityContext", {})
        if sc.get("privileged"):
            v.append(c["name"] + ": privileged")
        extra = set(sc.get("capabilities", {}).get("add", [])) - BASELINE_CAPS
        if extra:
            v.append(c["name"] + ": capabilities " + ",".join(sorted(extra)))
        if sc.get("procMount", "Default") != "Default":
            v.append(c["name"] + ": procMount")
        if sc.get("seccompProfile", {}).get("type") == "Unconfined":
            v.append(c["name"] + ": seccomp Unconfined")
        for p in c.get("ports", []):
            if p.get("hostPort"):
                v.append(c["name"] + ": hostPort")
    return v


def conf_text(docs, ns, name):
    for d in docs:
        if d.get("kind") == "ConfigMap" and d["metadata"]["name"] == name and \
                d["metadata"].get("namespace") == ns:
            return "\n".join(str(x) for x in d.get("data", {}).values())
    return ""


def main():
    mdir = sys.argv[1]
    versions = sys.argv[2:] or ["1.29.0", "1.33.0"]
    docs = []
    for path in sorted(glob.glob(os.path.join(mdir, "*.yaml"))):
        with open(path) as f:
            for i, d in enumerate(yaml.safe_load_all(f)):
                if d:
                    d["__src"] = "%s#%d %s/%s" % (os.path.basename(path), i, d.get("kind"),
                                                  d.get("metadata", {}).get("name"))
                    docs.append(d)
    check(len(docs) >= 10, "%d documents read from %s" % (len(docs), mdir))

    # 1. schemas
    for d in docs:
        body = {k: v for k, v in d.items() if k != "__src"}
        for ver in versions:
            try:
                kubernetes_validate.validate(body, ver, strict=True)
                ok, why = True, ""
            except kubernetes_validate.ValidationError as e:
                ok, why = False, ": " + str(e.message)[:300]
            check(ok, "schema %s (Kubernetes %s)%s" % (d["__src"], ver, why))

    # 2. namespaces
    namespaces = {d["metadata"]["name"]: d["metadata"].get("labels", {})
                  for d in docs if d["kind"] == "Namespace"}
    for d in docs:
        if d["kind"] == "Namespace":
            continue
        ns = d["metadata"].get("namespace")
        check(ns in namespaces, "%s: namespace %s is created by the manifests" % (d["__src"], ns))

    # 3. Pod Security
    saw_exception = False
    for d in docs:
        spec, meta = pod_spec(d)
        if spec is None:
            continue
        ns = d["metadata"]["namespace"]
        level = namespaces.get(ns, {}).get("pod-security.kubernetes.io/enforce", "privileged")
        v = baseline_violations(spec, meta)
        if level in ("baseline", "restricted"):
            check(not v, "%s admitted by Pod Security baseline (namespace %s)%s"
                  % (d["__src"], ns, ": " + "; ".join(v) if v else ""))
        else:
            saw_exception = True
            check(bool(v) and "hostPath volume socket-dir" in v,
                  "%s is the documented baseline exception (namespace %s enforces %s): %s"
                  % (d["__src"], ns, level, "; ".join(v)))
    check(saw_exception, "the per-node DaemonSet exception is present")

    # 4. one Kafka address
    brokers = set()
    for d in docs:
        if d["kind"] == "ConfigMap":
            for k, val in d.get("data", {}).items():
                if k == "brokers":
                    brokers.add(val.strip())
                for m in re.finditer(r"^\s*brokers\s*=\s*(\S+)", str(val), re.M):
                    brokers.add(m.group(1))
    check(len(brokers) == 1, "one Kafka address: %s" % sorted(brokers))

    # 5. containers: resources, probes, brokers from the ConfigMap; scrape off loopback
    for d in docs:
        spec, meta = pod_spec(d)
        if spec is None:
            continue
        for c in spec.get("initContainers", []) + spec.get("containers", []):
            where = "%s container %s" % (d["__src"], c["name"])
            r = c.get("resources", {})
            check(all(x in r.get(k, {}) for k in ("requests", "limits") for x in ("cpu", "memory")),
                  where + ": cpu/memory requests and limits")
            long_running = c in spec.get("containers", []) or c.get("restartPolicy") == "Always"
            if long_running:
                check("livenessProbe" in c and "readinessProbe" in c,
                      where + ": liveness and readiness probes")
            image = c.get("image", "")
            if ("collector" in image or "aggregator" in image) and long_running:
                env = {e["name"]: e for e in c.get("env", [])}
                key = [n for n in env if n.endswith("_BROKERS")]
                check(len(key) == 1 and env[key[0]].get("valueFrom", {})
                      .get("configMapKeyRef", {}).get("name") == "fleetprof-kafka",
                      where + ": brokers from ConfigMap fleetprof-kafka")
        ann = (meta or {}).get("annotations") or {}
        if ann.get("prometheus.io/scrape") == "true":
            ns = d["metadata"]["namespace"]
            text = "".join(conf_text(docs, ns, v["configMap"]["name"])
                           for v in spec.get("volumes", []) if "configMap" in v)
            listen = re.findall(r"^\s*(?:http-listen|http-addr)\s*=\s*(\S+)", text, re.M)
            check(bool(listen) and not any(x.startswith("127.") for x in listen)
                  and not spec.get("hostNetwork"),
                  "%s: scraped port %s served on the pod IP (%s)"
                  % (d["__src"], ann.get("prometheus.io/port"), listen))

    # 6. the aggregator's token
    secrets = {(d["metadata"]["namespace"], d["metadata"]["name"]) for d in docs
               if d["kind"] == "Secret"}
    for d in docs:
        spec, _ = pod_spec(d)
        if spec is None:
            continue
        for c in spec.get("containers", []):
            if "aggregator" not in c.get("image", ""):
                continue
            env = {e["name"]: e for e in c.get("env", [])}
            ref = env.get("FLEETPROF_AGGREGATOR_API_TOKEN", {}).get("valueFrom", {}) \
                .get("secretKeyRef", {})
            check((d["metadata"]["namespace"], ref.get("name")) in secrets,
                  "%s container %s: API token from a Secret of the manifests" % (d["__src"], c["name"]))

    print("check-manifests: %d failures" % len(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
