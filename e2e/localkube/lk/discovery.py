"""API discovery documents: legacy (APIVersions / APIGroupList / APIGroup / APIResourceList) and
aggregated (apidiscovery.k8s.io v2 and v2beta1 APIGroupDiscoveryList), built from the Registry.

negotiate(accept) picks the format from the Accept header the way kube-apiserver does: the first
acceptable entry wins; plain application/json (or */*) means legacy discovery.
"""

AGG_GROUP = "apidiscovery.k8s.io"
AGG_AS = "APIGroupDiscoveryList"

_SUB_KIND = {"scale": ("autoscaling", "v1", "Scale"), "binding": ("", "v1", "Binding"),
             "eviction": ("policy", "v1", "Eviction")}


def parse_accept(header):
    """[(mime, {params})] in header order."""
    out = []
    for part in (header or "").split(","):
        part = part.strip()
        if not part:
            continue
        fields = [f.strip() for f in part.split(";")]
        params = {}
        for f in fields[1:]:
            if "=" in f:
                k, v = f.split("=", 1)
                params[k.strip().lower()] = v.strip().strip('"')
        out.append((fields[0].lower(), params))
    return out


def negotiate(accept):
    """'v2', 'v2beta1' or 'legacy' (also for an empty header); None when nothing fits."""
    entries = parse_accept(accept)
    if not entries:
        return "legacy"
    for mime, p in entries:
        if mime in ("application/json", "application/*", "*/*"):
            if p.get("g") == AGG_GROUP and p.get("as") == AGG_AS:
                if p.get("v") in ("v2", "v2beta1"):
                    return p["v"]
                continue
            if "as" in p or "g" in p:
                continue
            return "legacy"
    return None


def content_type(fmt):
    if fmt in ("v2", "v2beta1"):
        return "application/json;g=%s;v=%s;as=%s" % (AGG_GROUP, fmt, AGG_AS)
    return "application/json"


# -- legacy ------------------------------------------------------------------------------

def api_versions(server_address):
    return {"kind": "APIVersions", "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0",
                                            "serverAddress": server_address}]}


def _group_entry(group, versions):
    vs = [{"groupVersion": "%s/%s" % (group, v), "version": v} for v in versions]
    return {"name": group, "versions": vs, "preferredVersion": vs[0]}


def api_group_list(registry):
    groups = [_group_entry(g, vs) for g, vs in registry.group_versions() if g]
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


def api_group(registry, group):
    for g, vs in registry.group_versions():
        if g == group and g:
            d = _group_entry(g, vs)
            d["kind"] = "APIGroup"
            d["apiVersion"] = "v1"
            return d
    return None


def api_resource_list(registry, group, version):
    types = registry.types_for(group, version)
    if not types:
        return None
    res = []
    for t in types:
        r = {"name": t.plural, "singularName": t.singular, "namespaced": t.namespaced,
             "kind": t.kind, "verbs": list(t.verbs)}
        if t.short_names:
            r["shortNames"] = list(t.short_names)
        if t.categories:
            r["categories"] = list(t.categories)
        res.append(r)
        for sub in t.subresources:
            sr = {"name": "%s/%s" % (t.plural, sub), "singularName": "",
                  "namespaced": t.namespaced, "kind": t.kind,
                  "verbs": ["get", "patch", "update"]}
            if sub in _SUB_KIND:
                g, v, k = _SUB_KIND[sub]
                sr["group"] = g
                sr["version"] = v
                sr["kind"] = k
            if sub == "log":
                sr["verbs"] = ["get"]
            elif sub == "binding":
                sr["verbs"] = ["create"]
            elif sub == "finalize":
                sr["verbs"] = ["update"]
            res.append(sr)
    gv = "%s/%s" % (group, version) if group else version
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv,
            "resources": res}


# -- aggregated --------------------------------------------------------------------------

def _resource_discovery(t):
    r = {"resource": t.plural,
         "responseKind": {"group": t.group, "version": t.version, "kind": t.kind},
         "scope": "Namespaced" if t.namespaced else "Cluster",
         "singularResource": t.singular,
         "verbs": list(t.verbs)}
    if t.short_names:
        r["shortNames"] = list(t.short_names)
    if t.categories:
        r["categories"] = list(t.categories)
    subs = []
    for sub in t.subresources:
        g, v, k = _SUB_KIND.get(sub, (t.group, t.version, t.kind))
        verbs = {"log": ["get"], "binding": ["create"], "finalize": ["update"]}.get(
            sub, ["get", "patch", "update"])
        subs.append({"subresource": sub, "responseKind": {"group": g, "version": v, "kind": k},
                     "verbs": verbs})
    if subs:
        r["subresources"] = subs
    return r


def aggregated(registry, core, fmt):
    """The APIGroupDiscoveryList for /api (core=True) or /apis."""
    items = []
    for g, vs in registry.group_versions():
        if bool(core) != (g == ""):
            continue
        versions = []
        for v in vs:
            versions.append({"version": v,
                             "resources": [_resource_discovery(t)
                                           for t in registry.types_for(g, v)],
                             "freshness": "Current"})
        md = {"creationTimestamp": None}
        if g:
            md["name"] = g
        items.append({"metadata": md, "versions": versions})
    return {"kind": AGG_AS, "apiVersion": "%s/%s" % (AGG_GROUP, fmt), "metadata": {},
            "items": items}
