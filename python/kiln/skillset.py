"""The skill set a workbench generation loads: read once, before the worker connects.

The host writes the validated set beside the control socket and passes it as
``--skills <path>``; load reads and removes it, and makes each skill importable as
``kiln.skills.<id>``, a module whose documentation is the skill's body. Importing a
refused id, as ``import kiln.skills.<id>`` or ``from kiln.skills import <id>``, raises
SkillRefused, naming the root and the reason, instead of a plain "no module named" or
"cannot import name" error, and ``kiln.skills.<id>`` raises an AttributeError that says
the same; any other unknown id is the usual ModuleNotFoundError.
"""
import json
import sys
import types

from kiln import startup, wire

PACKAGE = "kiln.skills"


class SkillRefused(ImportError):
    """An import of a skill id the host refused; the message says why.

    An ImportError, not a ModuleNotFoundError: ``from kiln.skills import <id>`` takes a
    ModuleNotFoundError for its name to mean "no such module", and says only "cannot
    import name".
    """


class _RefusedFinder:
    """A meta path finder that refuses the refused ids of the set, saying why."""

    def __init__(self, refused):
        self._refused = refused  # module name -> message

    def find_spec(self, name, path=None, target=None):
        message = self._refused.get(name)
        if message is not None:
            raise SkillRefused(message, name=name)
        return None


def load(source):
    """Read the skills at source (a file's path, the file then removed, or a pipe's
    descriptor: see startup.take), make them importable; return the set's revision. A
    set that cannot be read or is malformed ends the process."""
    data = startup.take("worker", source, "skills file")
    try:
        payload = json.loads(data)
        revision, entries = payload["revision"], payload["skills"]
        refused = payload.get("refused", [])  # a set with no refusals may leave it out
        if not wire.valid_identifier(revision) or not isinstance(entries, list) or \
                not isinstance(refused, list):
            raise ValueError("no revision identifier, skills list or refused list")
        skills = [(entry["id"], entry["body"]) for entry in entries]
        if not all(wire.valid_identifier(i) and isinstance(b, str) for i, b in skills):
            raise ValueError("a skill without an identifier or a text body")
        refusals = [(entry["id"], entry["root"], entry["reason"]) for entry in refused]
        if not all(isinstance(field, str) for refusal in refusals for field in refusal):
            raise ValueError("a refusal without a text id, root and reason")
    except (ValueError, TypeError, KeyError) as err:
        startup.fail("worker", f"the skills file is malformed: {err}")
    import kiln

    package = types.ModuleType(PACKAGE, "The skills this generation loaded, by id.")
    package.__path__ = []  # a package whose every module is already in sys.modules
    package.revision = revision
    for skill_id, body in skills:
        module = types.ModuleType(f"{PACKAGE}.{skill_id}", body)
        sys.modules[module.__name__] = module
        # An attribute only where it shadows nothing: not "revision", not a dunder.
        if skill_id.isidentifier() and not skill_id.startswith("_") and not hasattr(package, skill_id):
            setattr(package, skill_id, module)
    sys.modules[PACKAGE] = package
    kiln.skills = package
    messages = {}
    for skill_id, root, reason in refusals:
        messages.setdefault(f"{PACKAGE}.{skill_id}",
                            f"skill {skill_id!r} was refused ({root} root): {reason}")
    if messages:
        sys.meta_path.insert(0, _RefusedFinder(messages))
        package.__getattr__ = _refused_attribute(package, messages)
    return revision


def _refused_attribute(package, messages):
    """Return the module __getattr__ of package: an AttributeError for every name it
    lacks, saying why for a refused skill's."""
    def __getattr__(name):
        message = messages.get(f"{PACKAGE}.{name}")
        if message is None:
            raise AttributeError(f"module {PACKAGE!r} has no attribute {name!r}", name=name, obj=package)
        raise AttributeError(message, name=name, obj=package)
    return __getattr__
