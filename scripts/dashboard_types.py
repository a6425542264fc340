"""Type-check the dashboards' JSON against Grafana's current model with TypeScript.

``@grafana/schema`` (npm; installed under .cache/grafana-schema by scripts/test.sh) is
the TypeScript model Grafana itself builds dashboards with. Each dashboard JSON becomes
a TypeScript module of object literals, so ``tsc --strict`` rejects what the model does
not have (excess-property checks) as well as wrong types:

* the whole dashboard as ``Dashboard``;
* each panel's ``options`` and ``fieldConfig.defaults.custom`` as that panel type's
  ``Options`` / ``FieldConfig`` (``raw/composable/<type>/panelcfg``): ``Dashboard`` types
  options as a free record, the panel models do not.

The model's enums are rewritten as unions of their values first: JSON carries
``"thresholds"``, which a TypeScript enum would refuse although Grafana reads it.

    python3 scripts/dashboard_types.py [DASHBOARD.json ...]   # exit 1 on any error
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / ".cache" / "grafana-schema"
SCHEMA = CACHE / "node_modules" / "@grafana" / "schema"
TSC = CACHE / "node_modules" / "typescript" / "bin" / "tsc"
VERSION = "13.2.3"
TYPESCRIPT = "5.9.3"

# enum Name { A = "a", B = 2 } -> a union type plus a namespace of member types, so both
# `Name` and `Name.A` stay valid types.
_ENUM = re.compile(r"export declare enum (\w+) \{(.*?)\}", re.S)
_MEMBER = re.compile(r"(\w+)\s*=\s*(\"[^\"]*\"|-?\d+)")


def unions(text: str) -> str:
    def one(m: re.Match[str]) -> str:
        name, body = m.group(1), m.group(2)
        members = _MEMBER.findall(body)
        if not members:
            return m.group(0)
        union = " | ".join(v for _, v in members)
        inner = " ".join(f"type {k} = {v};" for k, v in members)
        return f"export type {name} = {union};\nexport declare namespace {name} {{ {inner} }}"
    return _ENUM.sub(one, text)


def prepare(dst: Path) -> Path:
    """A copy of @grafana/schema's types with enums as unions, as a package tsc resolves."""
    pkg = dst / "node_modules" / "@grafana" / "schema"
    for src in (SCHEMA / "dist" / "types").rglob("*.d.ts"):
        out = pkg / "dist" / "types" / src.relative_to(SCHEMA / "dist" / "types")
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(unions(src.read_text()))
    (pkg / "package.json").write_text(json.dumps({
        "name": "@grafana/schema", "version": VERSION, "types": "dist/types/index.d.ts"}))
    return pkg


def panels(doc: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    def walk(ps: Sequence[Any]) -> Iterator[Mapping[str, Any]]:
        for p in ps:
            if isinstance(p, dict):
                yield p
                yield from walk(p.get("panels") or [])
    yield from walk(doc.get("panels") or [])


# Grafana's Prometheus query model (public/app/plugins/datasource/prometheus,
# dataquery.gen.ts): not part of @grafana/schema, which types a query as the closed
# DataQuery. Panel targets and annotation targets are checked against it.
PROM_QUERY = """
type PromQuery = DataQuery & {
  expr: string;
  instant?: boolean;
  range?: boolean;
  exemplar?: boolean;
  editorMode?: "code" | "builder";
  format?: "time_series" | "table" | "heatmap";
  legendFormat?: string;
  intervalFactor?: number;
  interval?: string;
};
"""


def module(doc: Mapping[str, Any], known: Mapping[str, bool]) -> str:
    """The dashboard as TypeScript: one typed constant per checked object. Annotations
    and targets are checked as Prometheus queries first, then passed to the dashboard as
    variables (a literal would be checked against the closed DataQuery)."""
    lines = ['import type { AnnotationQuery, Dashboard, DataQuery } from "@grafana/schema";',
             PROM_QUERY]
    types = sorted({str(p.get("type")) for p in panels(doc)} & set(known))
    for t in types:
        ident = re.sub(r"\W", "_", t)
        lines.append(f'import type * as {ident} from '
                     f'"@grafana/schema/dist/types/raw/composable/{t}/panelcfg/x/types.gen";')
    body = dict(doc)
    annotations = dict(body.pop("annotations", None) or {})
    lines.append("export const annotations: AnnotationQuery<PromQuery>[] = "
                 f"{json.dumps(annotations.pop('list', []), indent=1)};")
    lines.append("const dashboardLiteral: Dashboard = "
                 f"{json.dumps(body, indent=1)[:-1]}, \"annotations\": "
                 f"{json.dumps(annotations)[:-1] + (', ' if annotations else '')}"
                 "\"list\": annotations}};")
    lines.append("export const dashboard = dashboardLiteral;")
    for i, p in enumerate(panels(doc)):
        if p.get("targets"):
            lines.append(f"export const targets_{i}: PromQuery[] = "
                         f"{json.dumps(p['targets'], indent=1)};")
        t = str(p.get("type"))
        if t not in known:
            continue
        ident = re.sub(r"\W", "_", t)
        title = json.dumps(str(p.get("title", "")))
        if "options" in p:
            lines.append(f"// {title}")
            lines.append(f"export const options_{i}: {ident}.Options = "
                         f"{json.dumps(p['options'], indent=1)};")
        custom = ((p.get("fieldConfig") or {}).get("defaults") or {}).get("custom")
        if custom is not None and known[t]:  # stat, text: no custom field config
            lines.append(f"export const custom_{i}: {ident}.FieldConfig = "
                         f"{json.dumps(custom, indent=1)};")
    return "\n".join(lines) + "\n"


def check(paths: Sequence[Path]) -> list[str]:
    """tsc's errors (``file(line,col): error TSxxxx: ...``), [] when clean."""
    if not TSC.exists() or not SCHEMA.exists():
        raise FileNotFoundError(f"{CACHE}: run scripts/test.sh (npm install) first")
    with tempfile.TemporaryDirectory(prefix="headroom-ts-") as tmp:
        work = Path(tmp)
        prepare(work)
        composable = SCHEMA / "dist" / "types" / "raw" / "composable"
        # panel type -> whether its model has a FieldConfig (custom field options)
        known = {d.name: "export interface FieldConfig" in f.read_text()
                 for d in composable.iterdir()
                 if (f := d / "panelcfg" / "x" / "types.gen.d.ts").exists()}
        names = []
        for path in paths:
            name = re.sub(r"\W", "_", path.stem) + ".ts"
            (work / name).write_text(module(json.loads(path.read_text()), known))
            names.append(name)
        (work / "tsconfig.json").write_text(json.dumps({
            "compilerOptions": {"strict": True, "noEmit": True, "target": "es2022",
                                "module": "es2022", "moduleResolution": "node",
                                "skipLibCheck": True, "types": []},
            "files": names}))
        node = shutil.which("node") or "node"
        r = subprocess.run([node, str(TSC), "-p", str(work / "tsconfig.json"), "--pretty",
                            "false"], capture_output=True, text=True, timeout=600, cwd=work)
        return [ln for ln in (r.stdout + r.stderr).splitlines() if "error TS" in ln]


def main(argv: Sequence[str]) -> int:
    paths = [Path(a) for a in argv] or sorted((ROOT / "dashboards").glob("*.json"))
    errors = check(paths)
    for e in errors:
        print(e)
    print(f"{len(errors)} errors in {len(paths)} dashboards (@grafana/schema {VERSION})")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
