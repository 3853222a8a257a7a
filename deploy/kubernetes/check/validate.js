'use strict';
/*
 * validate.js: checks the manifests of a kustomize directory (deploy/kubernetes/)
 * against the Kubernetes API schemas, offline, and prints one TAP line per object.
 *
 *   node validate.js DIR|FILE... [--conf-out FILE]
 *
 * Every YAML document of the files kustomization.yaml lists, and the ConfigMaps its
 * configMapGenerator makes, is checked three ways:
 *   - kubernetes-models' validators (the OpenAPI schemas of Kubernetes 1.32, compiled
 *     with ajv): types, required fields, enums, formats;
 *   - TypeScript's compiler against the same package's types, which, unlike the
 *     OpenAPI schemas, know which fields exist: an unknown field (a typo such as
 *     externalTraficPolicy, which the API server would drop or refuse) fails;
 *   - what no schema says but this fleet relies on: selectors that match the pod
 *     template, named ports that exist, the ConfigMap the pod mounts, the admin port of
 *     lookout.conf in the probes, each lookout.conf service address's port in the
 *     container and the Service, workers within the CPU limit, a grace period longer
 *     than the preStop hook and drain_timeout together, and a pod spec that meets the
 *     Pod Security Standard its namespace enforces (restricted).
 * A failure names the file, the kind, the name, the field and the reason.  The YAML
 * is read as Kubernetes reads it (YAML 1.1: `0440` is octal, `on` is a boolean).
 * A FILE instead of a DIR is what `kubectl kustomize` built of one, checked the same
 * way.  --conf-out writes lookout.conf as the first DIR's ConfigMap holds it, for `lookout
 * --check`.  Several DIRs are checked each on its own, in one run (one compiler
 * start), their lines prefixed with the directory's name and a "# DIR: N passed, N
 * failed" line for each.
 * The last line is "N passed, N failed"; the exit status is 1 if anything failed.
 */
const fs = require('fs');
const path = require('path');
const YAML = require('yaml');
const ts = require('typescript');

const results = [];

function report(ok, what, errors) {
    results.push({ ok, what, errors: errors || [] });
}

/* Reads every document of a YAML file; a syntax error is reported at its line. */
function readDocs(file, errors) {
    const text = fs.readFileSync(file, 'utf8');
    const docs = YAML.parseAllDocuments(text, { version: '1.1', prettyErrors: true, uniqueKeys: true });
    const out = [];
    docs.forEach((doc, i) => {
        for (const e of doc.errors)
            errors.push(`${path.basename(file)}: document ${i + 1}: ${e.message.split('\n')[0]}`);
        if (doc.errors.length === 0) {
            const obj = doc.toJS();
            if (obj !== null && obj !== undefined)
                out.push(obj);
        }
    });
    return out;
}

/* The keys of kustomization.yaml this directory uses, with the type each must have. */
const KUSTOMIZE_KEYS = {
    apiVersion: 'string', kind: 'string', namespace: 'string', resources: 'array',
    configMapGenerator: 'array', images: 'array', labels: 'array', commonAnnotations: 'object',
};

/*
 * Loads DIR through its kustomization.yaml: the objects of its resources (each file
 * must exist, and every YAML file of DIR but the kustomization must be listed, so
 * none is forgotten) and the ConfigMaps of configMapGenerator.
 */
function loadKustomization(dir) {
    const objects = [];
    const errors = [];
    const kfile = path.join(dir, 'kustomization.yaml');
    if (!fs.existsSync(kfile))
        return { objects, errors: [`${dir}: no kustomization.yaml`], confText: null };
    const [k] = readDocs(kfile, errors);
    if (!k)
        return { objects, errors, confText: null };
    if (k.apiVersion !== 'kustomize.config.k8s.io/v1beta1' || k.kind !== 'Kustomization')
        errors.push('kustomization.yaml: apiVersion/kind must be kustomize.config.k8s.io/v1beta1 Kustomization');
    for (const [key, value] of Object.entries(k)) {
        const want = KUSTOMIZE_KEYS[key];
        const got = Array.isArray(value) ? 'array' : typeof value;
        if (!want)
            errors.push(`kustomization.yaml: ${key}: not a key this check knows`);
        else if (got !== want)
            errors.push(`kustomization.yaml: ${key}: must be ${want === 'array' ? 'a list' : 'a ' + want}`);
    }
    const listed = new Set();
    for (const r of k.resources || []) {
        const file = path.join(dir, String(r));
        listed.add(path.basename(file));
        if (!fs.existsSync(file)) {
            errors.push(`kustomization.yaml: resources: ${r}: no such file`);
            continue;
        }
        readDocs(file, errors).forEach((obj, i) => objects.push({ file: String(r), index: i, obj }));
    }
    for (const f of fs.readdirSync(dir).sort())
        if (/\.ya?ml$/.test(f) && f !== 'kustomization.yaml' && !listed.has(f))
            errors.push(`${f}: not listed in kustomization.yaml's resources`);
    let confText = null;
    for (const g of k.configMapGenerator || []) {
        const data = {};
        for (const f of g.files || []) {
            const file = path.join(dir, String(f));
            if (!fs.existsSync(file)) {
                errors.push(`kustomization.yaml: configMapGenerator ${g.name}: ${f}: no such file`);
                continue;
            }
            data[path.basename(file)] = fs.readFileSync(file, 'utf8');
        }
        if ('lookout.conf' in data)
            confText = data['lookout.conf'];
        const obj = { apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: g.name }, data };
        if (k.namespace)
            obj.metadata.namespace = k.namespace;
        objects.push({ file: 'kustomization.yaml (configMapGenerator)', index: 0, obj });
    }
    return { objects, errors, confText };
}

/*
 * Loads a file of objects as `kubectl kustomize` writes them (what `kubectl apply -k`
 * sends): the ConfigMap under its hashed name, the namespace set, the image named.
 */
function loadBuilt(file) {
    const errors = [];
    const objects = readDocs(file, errors).map((obj, i) => ({ file: '', index: i, obj }));
    const cm = objects.find((o) => o.obj.kind === 'ConfigMap' && o.obj.data && 'lookout.conf' in o.obj.data);
    return { objects, errors, confText: cm ? cm.obj.data['lookout.conf'] : null, built: true };
}

/* kubernetes-models' module for an apiVersion and kind: apps/v1 Deployment -> apps/v1/Deployment. */
function modelPath(obj) {
    if (typeof obj.apiVersion !== 'string' || typeof obj.kind !== 'string' || !/^[A-Za-z]+$/.test(obj.kind))
        return null;
    const parts = obj.apiVersion.split('/');
    const rel = (parts.length === 2 ? parts.join('/') : parts[0]) + '/' + obj.kind;
    return /^[a-z0-9.]+(\/[a-z0-9]+)?\/[A-Za-z]+$/.test(rel) ? rel : null;
}

function describe(o) {
    const name = o.obj && o.obj.metadata && o.obj.metadata.name;
    return `${o.file ? o.file + ': ' : ''}${o.obj && o.obj.kind || '(no kind)'} ${name || '(no name)'}`;
}

/* The schema check: kubernetes-models' validator for the object's kind. */
function schemaErrors(o) {
    const rel = modelPath(o.obj);
    if (!rel)
        return ['apiVersion and kind must be strings naming an API type'];
    let Model;
    try {
        Model = require(`kubernetes-models/${rel}`)[o.obj.kind];
    } catch (e) {
        Model = undefined;
    }
    if (typeof Model !== 'function')
        return [`no schema for apiVersion ${o.obj.apiVersion}, kind ${o.obj.kind} (Kubernetes 1.32)`];
    try {
        new Model(o.obj).validate();
    } catch (e) {
        if (!Array.isArray(e.errors))
            throw e;
        return e.errors.map((x) => `${x.instancePath || '/'}: ${x.message}` +
            (x.params && x.params.allowedValues ? ` (${x.params.allowedValues.join(', ')})` : ''));
    }
    return [];
}

/*
 * Writes OBJ as a TypeScript object literal, one field per line, and records the
 * JSON path of each line, so that a compiler error's line names its field.
 */
function literal(obj, lines, paths, indent, at) {
    const pad = '  '.repeat(indent);
    if (Array.isArray(obj)) {
        lines[lines.length - 1] += '[';
        obj.forEach((v, i) => {
            lines.push(pad + '  ');
            paths.push(`${at}/${i}`);
            literal(v, lines, paths, indent + 1, `${at}/${i}`);
            lines[lines.length - 1] += ',';
        });
        lines.push(pad + ']');
        paths.push(at);
    } else if (obj !== null && typeof obj === 'object') {
        lines[lines.length - 1] += '{';
        for (const [key, v] of Object.entries(obj)) {
            const p = `${at}/${key}`;
            lines.push(`${pad}  ${JSON.stringify(key)}: `);
            paths.push(p);
            literal(v, lines, paths, indent + 1, p);
            lines[lines.length - 1] += ',';
        }
        lines.push(pad + '}');
        paths.push(at);
    } else {
        lines[lines.length - 1] += JSON.stringify(obj === undefined ? null : obj);
    }
}

/*
 * The field check: each object becomes `const o: IKind = {...}` in a file of its own,
 * and one TypeScript program checks them all, reading the package's .d.ts files from
 * node_modules; excess-property errors are the unknown fields.
 */
function typeErrors(list) {
    const here = __dirname;
    const files = new Map();
    list.forEach((o, i) => {
        const rel = modelPath(o.obj);
        if (!rel || o.schemaMissing)
            return;
        const lines = [`import type { I${o.obj.kind} } from "kubernetes-models/${rel}";`, `export const o: I${o.obj.kind} = `];
        const paths = ['', ''];
        literal(o.obj, lines, paths, 0, '');
        lines[lines.length - 1] += ';';
        files.set(path.join(here, `.virtual-${i}.ts`), { o, text: lines.join('\n') + '\n', paths });
    });
    const options = {
        strict: true, noEmit: true, types: [], skipLibCheck: true,
        module: ts.ModuleKind.Node16, moduleResolution: ts.ModuleResolutionKind.Node16, target: ts.ScriptTarget.ES2020,
    };
    const host = ts.createCompilerHost(options);
    const realGet = host.getSourceFile.bind(host);
    const realExists = host.fileExists.bind(host);
    const realRead = host.readFile.bind(host);
    host.getSourceFile = (name, lang, ...rest) => files.has(name)
        ? ts.createSourceFile(name, files.get(name).text, lang) : realGet(name, lang, ...rest);
    host.fileExists = (name) => files.has(name) || realExists(name);
    host.readFile = (name) => files.has(name) ? files.get(name).text : realRead(name);
    const program = ts.createProgram([...files.keys()], options, host);
    const byObject = new Map();
    for (const d of ts.getPreEmitDiagnostics(program)) {
        const msg = ts.flattenDiagnosticMessageText(d.messageText, ' ');
        const f = d.file && files.get(d.file.fileName);
        if (!f) {
            byObject.set(null, (byObject.get(null) || []).concat(msg));
            continue;
        }
        const { line } = d.file.getLineAndCharacterOfPosition(d.start);
        const unknown = /known properties, and '"?([^"']+)"?' does not exist in type 'I([A-Za-z0-9]+)'/.exec(msg);
        const text = unknown
            ? `${f.paths[line]}: unknown field: ${unknown[2].replace(/^IoK8s[A-Za-z]*V[0-9a-z]+(?=[A-Z])/, '')} has no field ${unknown[1]}`
            : `${f.paths[line] || '/'}: ${msg}`;
        byObject.set(f.o, (byObject.get(f.o) || []).concat(text));
    }
    return byObject;
}

/* lookout.conf as `key = value` per section ("lookout", "pulsar NAME"...), comments dropped. */
function parseConf(text) {
    const conf = {};
    let section = null;
    for (const raw of text.split('\n')) {
        const line = raw.replace(/(^|\s)[#;].*$/, '').trim();
        const head = /^\[(.+)\]$/.exec(line);
        if (head) {
            section = head[1].trim();
            conf[section] = conf[section] || {};
        } else if (section && line.includes('=')) {
            const i = line.indexOf('=');
            conf[section][line.slice(0, i).trim()] = line.slice(i + 1).trim();
        }
    }
    return conf;
}

function seconds(v) {
    const m = /^(\d+)(ms|s|m)$/.exec(v || '');
    return m ? Number(m[1]) * { ms: 0.001, s: 1, m: 60 }[m[2]] : null;
}

function matches(selector, labels) {
    return Object.entries(selector || {}).every(([k, v]) => labels && labels[k] === v);
}

/*
 * The "restricted" Pod Security Standard, which namespace.yaml enforces: a pod spec
 * that breaks it is refused by the API server when the Deployment makes its pods, not
 * when the Deployment is applied, so it is checked here.
 */
function restrictedErrors(pod) {
    const out = [];
    const psc = pod.securityContext || {};
    for (const key of ['hostNetwork', 'hostPID', 'hostIPC'])
        if (pod[key])
            out.push(`/${key}: not allowed under the restricted Pod Security Standard`);
    (pod.volumes || []).forEach((v, i) => {
        if (v.hostPath)
            out.push(`/volumes/${i}/hostPath: not allowed under the restricted Pod Security Standard`);
    });
    (pod.containers || []).concat(pod.initContainers || []).forEach((c, i) => {
        const sc = c.securityContext || {};
        const at = `/containers/${i}/securityContext`;
        const caps = sc.capabilities || {};
        if (sc.allowPrivilegeEscalation !== false)
            out.push(`${at}/allowPrivilegeEscalation: must be false (restricted Pod Security Standard)`);
        if (sc.privileged)
            out.push(`${at}/privileged: must not be true (restricted Pod Security Standard)`);
        if (!(caps.drop || []).includes('ALL'))
            out.push(`${at}/capabilities/drop: must hold ALL (restricted Pod Security Standard)`);
        if ((caps.add || []).some((x) => x !== 'NET_BIND_SERVICE'))
            out.push(`${at}/capabilities/add: only NET_BIND_SERVICE (restricted Pod Security Standard)`);
        if ((sc.runAsNonRoot === undefined ? psc.runAsNonRoot : sc.runAsNonRoot) !== true)
            out.push(`${at}/runAsNonRoot: must be true, here or for the pod (restricted Pod Security Standard)`);
        if ((sc.runAsUser === undefined ? psc.runAsUser : sc.runAsUser) === 0)
            out.push(`${at}/runAsUser: must not be 0 (restricted Pod Security Standard)`);
        const seccomp = (sc.seccompProfile || psc.seccompProfile || {}).type;
        if (seccomp !== 'RuntimeDefault' && seccomp !== 'Localhost')
            out.push(`${at}/seccompProfile: RuntimeDefault or Localhost, here or for the pod (restricted Pod Security Standard)`);
    });
    return out;
}

/* What the fleet relies on beyond the schemas; each failure is added to its object's errors. */
function fleetErrors(list, confText) {
    const errs = new Map();
    const add = (o, msg) => errs.set(o, (errs.get(o) || []).concat(msg));
    const of = (kind) => list.filter((o) => o.obj.kind === kind);
    const configMaps = new Set(of('ConfigMap').map((o) => o.obj.metadata.name));
    const conf = confText ? parseConf(confText) : {};
    const pods = [];
    for (const o of of('Deployment')) {
        const spec = o.obj.spec || {};
        const tpl = spec.template || {};
        const labels = (tpl.metadata || {}).labels || {};
        if (!matches((spec.selector || {}).matchLabels, labels))
            add(o, '/spec/selector: does not match the pod template\'s labels');
        const podSpec = tpl.spec || {};
        const containers = podSpec.containers || [];
        const ports = new Map();
        containers.forEach((c) => (c.ports || []).forEach((p) => ports.set(p.name, p.containerPort)));
        pods.push({ labels, ports });
        for (const v of podSpec.volumes || [])
            if (v.configMap && !configMaps.has(v.configMap.name))
                add(o, `/spec/template/spec/volumes/${v.name}: ConfigMap ${v.configMap.name} is not among the objects`);
        containers.forEach((c, ci) => {
            const at = `/spec/template/spec/containers/${ci}`;
            for (const probe of ['readinessProbe', 'livenessProbe', 'startupProbe']) {
                const port = c[probe] && c[probe].httpGet && c[probe].httpGet.port;
                if (typeof port === 'string' && !ports.has(port))
                    add(o, `${at}/${probe}/httpGet/port: no container port is named ${port}`);
            }
            if (!confText)
                return;
            const lk = conf.lookout || {};
            const admin = /:(\d+)$/.exec(lk.admin || '');
            const ready = c.readinessProbe && c.readinessProbe.httpGet;
            if (admin && ready && (ports.get(ready.port) || ready.port) !== Number(admin[1]))
                add(o, `${at}/readinessProbe/httpGet/port: lookout.conf's admin listener is on port ${admin[1]}`);
            for (const [section, keys] of Object.entries(conf))
                for (const key of ['webServiceUrl', 'serviceUrl', 'bootstrap.servers'])
                    for (const addr of (keys[key] || '').split(',').filter(Boolean)) {
                        const port = /:(\d+)(\/.*)?$/.exec(addr.trim());
                        if (port && ![...ports.values()].includes(Number(port[1])))
                            add(o, `${at}/ports: [${section}] ${key}'s port ${port[1]} is not a container port`);
                    }
            const cpu = Number(((c.resources || {}).limits || {}).cpu);
            if (/^\d+$/.test(lk.workers || '') && cpu && Number(lk.workers) > cpu)
                add(o, `${at}/resources/limits/cpu: lookout.conf's workers (${lk.workers}) is over the CPU limit (${cpu})`);
            const stop = ((c.lifecycle || {}).preStop || {}).exec;
            const sleep = stop && stop.command && stop.command[0] === 'sleep' ? Number(stop.command[1]) : 0;
            const drain = seconds(lk.drain_timeout || '30s');
            const grace = podSpec.terminationGracePeriodSeconds === undefined ? 30 : podSpec.terminationGracePeriodSeconds;
            if (grace <= sleep + drain)
                add(o, `/spec/template/spec/terminationGracePeriodSeconds: ${grace} s is not above the preStop sleep (${sleep} s) plus drain_timeout (${drain} s)`);
        });
    }
    const restricted = of('Namespace').some((o) =>
        ((o.obj.metadata || {}).labels || {})['pod-security.kubernetes.io/enforce'] === 'restricted');
    if (restricted)
        for (const o of of('Deployment'))
            for (const msg of restrictedErrors(((o.obj.spec || {}).template || {}).spec || {}))
                add(o, `/spec/template/spec${msg}`);
    for (const o of of('Service')) {
        const spec = o.obj.spec || {};
        const pod = pods.find((p) => matches(spec.selector, p.labels));
        if (!pod) {
            add(o, '/spec/selector: selects no pod template of these objects');
            continue;
        }
        (spec.ports || []).forEach((p, i) => {
            if (typeof p.targetPort === 'string' && !pod.ports.has(p.targetPort))
                add(o, `/spec/ports/${i}/targetPort: no container port is named ${p.targetPort}`);
        });
        if (confText)
            for (const [section, keys] of Object.entries(conf))
                for (const key of ['webServiceUrl', 'serviceUrl', 'bootstrap.servers'])
                    for (const addr of (keys[key] || '').split(',').filter(Boolean)) {
                        const port = /:(\d+)(\/.*)?$/.exec(addr.trim());
                        if (port && !(spec.ports || []).some((p) => p.port === Number(port[1])))
                            add(o, `/spec/ports: [${section}] ${key}'s port ${port[1]} is not a Service port`);
                    }
    }
    for (const o of of('PodDisruptionBudget'))
        if (!pods.some((p) => matches(((o.obj.spec || {}).selector || {}).matchLabels, p.labels)))
            add(o, '/spec/selector: selects no pod template of these objects');
    return errs;
}

function main(argv) {
    const at = argv.indexOf('--conf-out');
    const confOut = at >= 0 ? argv[at + 1] : null;
    const dirs = argv.filter((a, i) => a !== '--conf-out' && (at < 0 || i !== at + 1));
    if (dirs.length === 0) {
        console.error('usage: node validate.js DIR... [--conf-out FILE]');
        return 2;
    }
    /* Several directories are checked in one TypeScript program, each on its own. */
    const many = dirs.length > 1;
    const loaded = dirs.map((dir) => {
        const label = many ? path.basename(path.resolve(dir)) + ': ' : '';
        return { dir, label, ...(fs.statSync(dir).isDirectory() ? loadKustomization(dir) : loadBuilt(dir)) };
    });
    const all = [];
    for (const d of loaded)
        for (const o of d.objects) {
            const e = schemaErrors(o);
            o.schemaMissing = e.length === 1 && /^(no schema|apiVersion and kind)/.test(e[0]);
            o.schema = e;
            all.push(o);
        }
    const types = typeErrors(all);
    const summary = [];
    for (const d of loaded) {
        const first = results.length;
        report(d.errors.length === 0, d.label + (d.built ? 'the YAML reads' : 'kustomization.yaml: its files'), d.errors);
        const fleet = fleetErrors(d.objects.filter((o) => !o.schemaMissing), d.confText);
        for (const o of d.objects) {
            const e = [...o.schema, ...(types.get(o) || []), ...(fleet.get(o) || [])];
            report(e.length === 0, d.label + describe(o), [...new Set(e)]);
        }
        if (confOut && d === loaded[0]) {
            if (d.confText === null)
                report(false, `${d.label}lookout.conf from the ConfigMap`, ['no configMapGenerator holds lookout.conf']);
            else
                fs.writeFileSync(confOut, d.confText);
        }
        const mine = results.slice(first);
        summary.push(`# ${d.label}${mine.length - mine.filter((r) => !r.ok).length} passed, ${mine.filter((r) => !r.ok).length} failed`);
    }
    if (types.has(null))
        report(false, 'TypeScript', types.get(null));
    let n = 0;
    for (const r of results) {
        n++;
        console.log(`${r.ok ? 'ok' : 'not ok'} ${n} - ${r.what}`);
        for (const e of r.errors)
            console.log(`#   ${r.what}: ${e}`);
    }
    if (many)
        summary.forEach((line) => console.log(line));
    const failed = results.filter((r) => !r.ok).length;
    console.log(`${results.length - failed} passed, ${failed} failed`);
    return failed ? 1 : 0;
}

process.exitCode = main(process.argv.slice(2));
