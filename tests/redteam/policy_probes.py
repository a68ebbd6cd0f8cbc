"""Red team: escape attempts against restrict.check_source (policy only; no compile). Prints the
refusal for each, or ACCEPTED (then it must be judged by what it can do at run time)."""
from labkit.grading.restrict import Refused, check_source

PROBES = {
    "gc": "import gc\n",
    "frame via generator": "def g():\n    yield 1\nx = g().gi_frame\n",
    "dunder class": "x = (1).__class__\n",
    "format field": "s = '{0.__class__}'.format(1)\n",
    "str.format unbound": "s = str.format('{0.__class__}', 1)\n",
    "fstring dunder": "s = f'{(1).__class__}'\n",
    "operator module": "import operator\n",
    "functools": "import functools\n",
    "getattr builtin": "f = getattr\n",
    "vars via dict": "d = dict(vars())\n",
    "setattr on module via self": "class P:\n    def put(self, v):\n        self.compile = v\nP.put(torch, 1)\n",
    "walrus rebind tl": "(tl := torch)\n",
    "torch.library Library IMPL aten": "L = torch.library.Library('aten', 'IMPL')\n",
    "custom_op": "@torch.library.custom_op('a::b', mutates_args=())\ndef f(x: torch.Tensor) -> torch.Tensor:\n    return x\n",
    "set_grad_enabled": "torch.set_grad_enabled(False)\n",
    "manual_seed": "torch.manual_seed(0)\n",
    "torch.utils.data": "d = torch.utils.data\n",
    "numpy.ctypeslib": "import numpy\nc = numpy.ctypeslib\n",
    "numpy frombuffer": "import numpy\na = numpy.frombuffer(b'1234', dtype='u1')\n",
    "json object_hook": "import json\nv = json.JSONDecoder(object_hook=print).decode('{}')\n",
    "collections namedtuple module=": "import collections\nT = collections.namedtuple('T', 'a', module='torch')\n",
    "Tensor.register_hook": "def f(t):\n    t.register_hook(print)\n",
    "torch.ops.aten override via impl": "torch.library.impl('aten::allclose', 'CPU')(lambda *a, **k: True)\n",
    "register_fake on aten": "torch.library.register_fake('aten::allclose')(lambda *a, **k: True)\n",
    "class attr store": "class A:\n    pass\nA.x = 1\n",
    "subscript store on torch dict": "torch.__dict__['compile'] = 1\n",
    "nn.Module.__setattr__ route": "m = torch.nn.Module()\nm.compile = 1\n",
    "type() 3-arg": "T = type('T', (), {})\n",
    "exception traceback": "try:\n    1/0\nexcept Exception as e:\n    t = e.__traceback__\n",
    "exception with_traceback": "try:\n    1/0\nexcept Exception as e:\n    t = e.with_traceback(None)\n",
}
for name, src in PROBES.items():
    try:
        check_source(src, "<probe>")
        print(f"ACCEPTED  {name}")
    except Refused as exc:
        print(f"refused   {name}: {exc}")
