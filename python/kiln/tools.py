"""The ``tools`` object of a workbench namespace: the host's tools, callable from cells.

The host writes the generation's tool catalog beside the control socket and passes it as
``--tools <path>``; load reads and removes it. Each tool is an async function
``tools.<namespace>.<name>``, called with keyword arguments only::

    result = await tools.files.read_file(path="notes.txt")

The call is a ``tools.call`` host request: the host validates the arguments against the
tool's input schema, runs the tool, and answers its result (an MCP tool's structured
content when it has some, else its text). A refusal or a failure raises ToolError, a
HostError whose ``code`` says which (invalid_arguments, tool_error, tool_unavailable,
tool_timeout, request_limit, …) and whose ``message`` is the tool's own for a tool_error.

Each function's ``__doc__`` (and ``help()``) is the tool's description and input
schema; ``dir(tools)`` lists the namespaces, ``dir(tools.<namespace>)`` their tools.
"""
import json

from kiln import startup
from kiln.runtime import HostError

METHOD = "tools.call"


class ToolError(HostError):
    """A tool call that failed: ``code`` says how, ``message`` says why."""


class Namespace:
    """One namespace of tools: an attribute per tool.

    What it holds is kept under keys no identifier can be ("kiln name"), so that a tool
    called ``_name`` is reached like any other.
    """

    def __init__(self, name, functions):
        self.__dict__["kiln name"] = name
        self.__dict__["kiln functions"] = functions  # attribute -> async function

    def __getattr__(self, attr):
        functions = self.__dict__["kiln functions"]
        try:
            return functions[attr]
        except KeyError:
            raise AttributeError(f"tools.{self.__dict__['kiln name']} has no tool {attr!r}; "
                                 f"it has: {', '.join(sorted(functions)) or 'none'}") from None

    def __dir__(self):
        return sorted(self.__dict__["kiln functions"])

    def __repr__(self):
        return f"<tools.{self.__dict__['kiln name']}: {', '.join(dir(self))}>"


class Tools:
    """The namespaces of the host's tools, each an attribute (kept as Namespace keeps its
    tools)."""

    ToolError = ToolError

    def __init__(self, namespaces):
        self.__dict__["kiln namespaces"] = namespaces  # name -> Namespace

    def __getattr__(self, name):
        namespaces = self.__dict__["kiln namespaces"]
        try:
            return namespaces[name]
        except KeyError:
            raise AttributeError(f"no tool namespace {name!r}; the host offers: "
                                 f"{', '.join(sorted(namespaces)) or 'none'}") from None

    def __dir__(self):
        return sorted(self.__dict__["kiln namespaces"])

    def __repr__(self):
        return f"<tools: {', '.join(dir(self)) or 'none'}>"


def _doc(entry):
    """The callable's documentation: the description, then the input schema."""
    parts = [entry["description"].strip() or "(no description)"]
    schema = entry.get("input_schema")
    if schema is not None:
        parts.append("Input schema (JSON Schema; pass the members as keyword arguments):\n"
                     + json.dumps(schema, indent=2, sort_keys=True, ensure_ascii=False))
    return "\n\n".join(parts)


def _function(runtime, entry):
    """The async function that calls one tool through the host."""
    namespace, name = entry["namespace"], entry["name"]

    async def call(*positional, **arguments):
        # One calling convention with programs: keyword arguments, or one dict of them.
        if positional:
            if arguments or len(positional) > 1 or not isinstance(positional[0], dict):
                raise TypeError(f"tools.{namespace}.{entry['attr']} takes keyword arguments, "
                                "or one dict of them, not both")
            arguments = positional[0]
        try:
            return await runtime.request(METHOD, namespace=namespace, name=name, arguments=arguments)
        except ToolError:
            raise
        except HostError as err:
            raise ToolError(err.code, err.message) from None

    call.__module__ = f"tools.{namespace}"
    call.__name__ = entry["attr"]
    call.__qualname__ = f"tools.{namespace}.{entry['attr']}"
    call.__doc__ = _doc(entry)
    return call


def build(runtime, entries):
    """The tools object of entries, each a catalog entry, calling through runtime."""
    grouped = {}
    for entry in entries:
        grouped.setdefault(entry["namespace"], {})[entry["attr"]] = _function(runtime, entry)
    return Tools({name: Namespace(name, functions) for name, functions in grouped.items()})


def load(runtime, source=None):
    """The tools object of the catalog at source (a file's path, the file then removed,
    or a pipe's descriptor: see startup.take); an empty one when source is None. A
    catalog that cannot be read or is malformed ends the process."""
    if source is None:
        return Tools({})
    data = startup.take("worker", source, "tools file")
    try:
        entries = json.loads(data)["tools"]
        if not isinstance(entries, list):
            raise ValueError("no tools list")
        for entry in entries:
            if not all(isinstance(entry.get(key), str) for key in ("namespace", "name", "attr", "description")) \
                    or not entry["namespace"].isidentifier() or not entry["attr"].isidentifier():
                raise ValueError(f"a tool without a namespace, name, attribute and description: {entry!r:.200}")
    except (ValueError, TypeError, KeyError, AttributeError) as err:
        startup.fail("worker", f"the tools file is malformed: {err}")
    return build(runtime, entries)
