"""Prints the pip requirements of the integrations Home Assistant sets up for the check's configuration.

Run with the Home Assistant venv's python. Home Assistant installs an integration's requirements itself at
start-up when they are missing; installing them beforehand keeps pip (and the network) out of the run.
The set is the dependency closure of what bootstrap always sets up (core, logging and default
integrations) plus the domains named on the command line (those of configuration.yaml and the config
entries), read from each integration's manifest.json.
"""

import json
import pathlib
import sys

import homeassistant.bootstrap as bootstrap
import homeassistant.components as components

root = pathlib.Path(components.__file__).parent
pending = set(bootstrap.CORE_INTEGRATIONS) | set(bootstrap.DEFAULT_INTEGRATIONS) | set(sys.argv[1:])
pending |= {"logger", "system_log"}
seen = set()
requirements = set()
while pending:
    domain = pending.pop()
    if domain in seen:
        continue
    seen.add(domain)
    manifest = json.loads((root / domain / "manifest.json").read_text())
    requirements.update(manifest.get("requirements", []))
    pending.update(manifest.get("dependencies", []))
print("\n".join(sorted(requirements)))
