"""The live peak as a flame graph (an icicle) in the HTML report: its tree, its data, its script.

Each variant's :class:`~fieldmem.model.memory.PeakBreakdown` is laid out as a tree whose
root is the live peak: ``arguments`` (each argument leaf under its pytree path's
parts: ``params`` > ``['layer1']`` > ``['w']``), the values the program computes
under the Python stack of the operation that made them (outermost frame first,
library frames kept and marked; an output's path a leaf under its frames, a
frame's temporaries a leaf of their own when the frame has deeper frames too),
and ``constants``. Every node's bytes are the sum of its children's, and the
root's the sum of the breakdown's sources: the report's own numbers, regrouped,
nothing computed. The tree is built here, in Python, so that it is tested
without a browser; the page's script only lays it out, searches and zooms.

To keep a page of a model of thousands of leaves small, a node lists its
:data:`MAX_CHILDREN` largest children and one ``… N more`` node for the rest,
and a source embeds its :data:`MAX_BUFFERS` largest buffers and a count of the
others; the page says so where it happens, and the JSON report keeps them all.

The data goes into the page as JSON in a ``<script type="application/json">``
block with ``<``, ``>`` and ``&`` written as JSON escapes, so no user's path can
close the block; the script reads it with ``JSON.parse`` and writes every
string with ``textContent``, never as markup.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from fieldmem.model.memory import PeakBreakdown, PeakSource
from fieldmem.model.target import TargetResult

__all__ = ["FLAME_CSS", "FLAME_JS", "MAX_BUFFERS", "MAX_CHILDREN", "FlameNode", "flame_data", "peak_tree"]

MAX_CHILDREN = 120  # children per node drawn and searchable; the rest are one "… N more" node
MAX_BUFFERS = 25  # buffers per source embedded for the click panel; the rest are counted
_VARIANTS = ("plain", "donated")
_VARIANT_LABEL = {"plain": "plain (no donation)", "donated": "donated"}

# a pytree path's parts after its parameter name: ['key'], ["key"], [0], .attr
_PART = re.compile(r"""\['(?:[^'\\]|\\.)*'\]|\["(?:[^"\\]|\\.)*"\]|\[[^\]'"]*\]|\.[^.\[]+""")


@dataclass(frozen=True)
class FlameNode:
    """One frame of the flame graph.

    ``name``: what its box shows; ``search``: what the search box matches (a frame's
    ``file:line function``, an argument's path up to here); ``kind``: how it is coloured
    (``root``, ``group``, ``argument``, ``frame``, ``library``, ``output``, ``temporary``,
    ``constant``, ``unknown``, ``more``); ``bytes``: its children's, or its sources' when it has
    none; ``sources``: indices into the breakdown's sources whose buffers it holds itself.
    """

    name: str
    search: str
    kind: str
    bytes: int
    padding_bytes: int = 0
    children: tuple[FlameNode, ...] = ()
    sources: tuple[int, ...] = ()
    hidden: int = 0  # a "… N more" node: how many nodes it stands for

    def walk(self) -> Iterator[FlameNode]:
        """This node and every node under it, depth first."""
        stack = [self]
        while stack:
            node = stack.pop()
            yield node
            stack.extend(reversed(node.children))


@dataclass
class _Builder:
    name: str
    search: str
    kind: str
    children: dict[tuple[object, ...], _Builder] = field(default_factory=dict)
    sources: list[int] = field(default_factory=list)

    def child(self, key: tuple[object, ...], name: str, search: str, kind: str) -> _Builder:
        found = self.children.get(key)
        if found is None:
            found = self.children[key] = _Builder(name, search, kind)
        return found


def _path_parts(path: str) -> list[str]:
    """``params['layer1']['w']`` -> ``params``, ``['layer1']``, ``['w']``; a path that does not read as
    a pytree path is one part."""
    head = re.match(r"[^\[.]+", path)
    if head is None:
        return [path]
    parts = [head.group()]
    position = head.end()
    for match in _PART.finditer(path, position):
        if match.start() != position:
            return [path]
        parts.append(match.group())
        position = match.end()
    return parts if position == len(path) else [path]


def peak_tree(breakdown: PeakBreakdown) -> FlameNode:
    """The flame graph's tree of one variant's live peak (see the module's docstring)."""
    root = _Builder("live peak", "live peak", "root")
    arguments = _Builder("arguments", "arguments", "group")
    constants = _Builder("constants", "constants", "constant")
    computed = _Builder("", "", "root")  # the top-level frames, kept apart to order them after the arguments
    for index, source in enumerate(breakdown.sources):
        if source.kind == "argument":
            node, prefix = arguments, ""
            for part in _path_parts(source.input or "argument"):
                prefix += part
                node = node.child(("argument", prefix), part, prefix, "argument")
            node.sources.append(index)
        elif source.kind == "constant":
            constants.sources.append(index)
        else:
            node = _frames(computed, source)
            if source.output is not None:
                node = node.child(("output", source.output), source.output, source.output, "output")
            node.sources.append(index)
    sizes = [source.bytes for source in breakdown.sources]
    paddings = [source.padding_bytes for source in breakdown.sources]
    top = [arguments] if arguments.children or arguments.sources else []
    frames = sorted((_finish(node, sizes, paddings) for node in computed.children.values()), key=_order)
    tail = [_finish(constants, sizes, paddings)] if constants.sources else []
    children = tuple([_finish(node, sizes, paddings) for node in top] + _capped(frames) + tail)
    return FlameNode(
        root.name,
        root.search,
        root.kind,
        sum(child.bytes for child in children),
        sum(child.padding_bytes for child in children),
        children,
    )


def _frames(computed: _Builder, source: PeakSource) -> _Builder:
    """The node of the innermost frame of a computed value's stack (a value without one: its line's)."""
    node = computed
    if not source.stack:
        line = source.line
        return node.child(("line", line), line or "no source", line or "no source", "frame" if line else "unknown")
    for frame in source.stack:
        where = f"{frame.file}:{frame.line}"
        function = frame.function or "?"
        node = node.child(
            ("frame", frame.file, frame.line, frame.function, frame.library),
            f"{function} {frame.file.rsplit('/', 1)[-1]}:{frame.line}",  # the box is narrow: the file's name
            f"{where} {function}",
            "library" if frame.library else "frame",
        )
    return node


def _order(node: FlameNode) -> tuple[int, str]:
    return (-node.bytes, node.search)


def _finish(node: _Builder, sizes: list[int], paddings: list[int]) -> FlameNode:
    """The frozen node, its children largest first (and capped), its own sources a leaf of their own
    when it has children as well."""
    children = sorted((_finish(child, sizes, paddings) for child in node.children.values()), key=_order)
    sources = tuple(node.sources)
    if children and sources:
        kind = "temporary" if node.kind in ("frame", "library", "unknown") else node.kind
        name = "temporaries" if kind == "temporary" else "(itself)"
        own = FlameNode(
            name,
            f"{node.search} {name}",
            kind,
            sum(sizes[i] for i in sources),
            sum(paddings[i] for i in sources),
            sources=sources,
        )
        children = sorted([*children, own], key=_order)
        sources = ()
    shown = tuple(_capped(children))
    return FlameNode(
        node.name,
        node.search,
        node.kind,
        sum(child.bytes for child in shown) + sum(sizes[i] for i in sources),
        sum(child.padding_bytes for child in shown) + sum(paddings[i] for i in sources),
        shown,
        sources,
    )


def _capped(children: list[FlameNode]) -> list[FlameNode]:
    """The :data:`MAX_CHILDREN` largest children, and one node for the rest holding their sources."""
    if len(children) <= MAX_CHILDREN:
        return children
    kept, rest = children[: MAX_CHILDREN - 1], children[MAX_CHILDREN - 1 :]
    sources = tuple(i for child in rest for node in child.walk() for i in node.sources)
    return [
        *kept,
        FlameNode(
            f"… {len(rest)} more",
            "",
            "more",
            sum(child.bytes for child in rest),
            sum(child.padding_bytes for child in rest),
            sources=sources,
            hidden=len(rest),
        ),
    ]


# ----------------------------------------------------------------------------
# The page's data.


def _node_data(node: FlameNode, embedded: dict[int, int]) -> list[Any]:
    """A node as the script reads it: [name, search (0: the name), kind, bytes, padding, children,
    sources (their places in the embedded list)]. A "… more" node's sources stay out of the page:
    embedding them would undo the cap."""
    sources = [] if node.kind == "more" else [embedded.setdefault(i, len(embedded)) for i in node.sources]
    return [
        node.name,
        0 if node.search == node.name else node.search,
        node.kind,
        node.bytes,
        node.padding_bytes,
        [_node_data(child, embedded) for child in node.children],
        sources,
    ]


def _source_label(source: PeakSource) -> str:
    if source.kind == "argument":
        return source.input or "argument"
    if source.kind == "constant":
        return "constants"
    where = source.line or "no source"
    return f"{where} → {source.output}" if source.output else where


def _source_data(source: PeakSource) -> list[Any]:
    """[label, kind, buffers (bytes, kind, instruction, shape, padding; the largest), how many more,
    their bytes]."""
    shown = source.buffers[:MAX_BUFFERS]
    rest = source.buffers[MAX_BUFFERS:]
    return [
        _source_label(source),
        source.kind,
        [[b.bytes, b.kind, b.instruction or "", b.shape or "", b.padding_bytes] for b in shown],
        len(rest),
        sum(b.bytes for b in rest),
    ]


def flame_data(result: TargetResult) -> dict[str, Any] | None:
    """What the page's script draws for one target: each variant's tree and sources on one byte scale
    (the larger peak); None when no variant has a breakdown."""
    variants = []
    for name in _VARIANTS:
        variant = result.variants.get(name)
        if variant is None or variant.peak is None:
            continue
        tree = peak_tree(variant.peak)
        embedded: dict[int, int] = {}  # a source's index in the breakdown -> its place in the page's list
        root = _node_data(tree, embedded)
        variants.append(
            {
                "variant": name,
                "label": _VARIANT_LABEL[name],
                "peak": variant.peak.bytes,
                "root": root,
                "sources": [_source_data(variant.peak.sources[i]) for i in embedded],
                "capped": sum(1 for node in tree.walk() if node.kind == "more"),
                "buffers_capped": sum(1 for i in embedded if len(variant.peak.sources[i].buffers) > MAX_BUFFERS),
            }
        )
    if not variants:
        return None
    scale = max(max(variant.peak.bytes for variant in result.variants.values() if variant.peak is not None), 1)
    return {"scale": scale, "variants": variants}


def script_json(data: object) -> str:
    """``data`` as JSON that may stand inside a ``<script>`` block: no ``<``, ``>`` or ``&`` in it (each
    written as its JSON escape), so nothing in a string can end the block or open a comment."""
    text = json.dumps(data, ensure_ascii=True, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


# ----------------------------------------------------------------------------
# Its look and its script (added to the page's own).

FLAME_CSS = """
section.flame{margin:10px 0 14px}
.flame-controls{display:flex;flex-wrap:wrap;gap:8px;align-items:center;margin:4px 0 8px}
.flame-controls input{font:inherit;padding:3px 8px;width:300px;border:1px solid #d1d5db;border-radius:5px}
.flame-found{font-size:12.5px}
.flame-panels{display:grid;grid-template-columns:repeat(auto-fit,minmax(440px,1fr));gap:14px}
.flame-panel h4{font-size:13px;margin:2px 0 4px;font-weight:600;color:#374151}
.flame-panel h4 .swatch{vertical-align:middle}
.icicle{position:relative;width:100%;min-height:20px;font:11.5px/18px system-ui,"DejaVu Sans",sans-serif}
.icicle .fr{position:absolute;height:18px;padding:0;text-indent:3px;overflow:hidden;white-space:nowrap;
text-overflow:ellipsis;color:#1f2328;box-shadow:inset -1px 0 #fff,inset 0 -1px #fff;cursor:pointer}
.icicle .fr:hover,.icicle .fr:focus{outline:2px solid #1f2937;outline-offset:-2px;z-index:1}
.k-root{background:#ced4da;font-weight:600}.k-group{background:#ffc078}.k-argument{background:#ffe8cc}
.k-frame{background:#d0bfff}.k-output{background:#b2f2bb}.k-temporary{background:#eebefa}.k-constant{background:#a5d8ff}
.k-unknown{background:#ffc9c9}.k-library{background:#e9ecef;outline:1px dashed #868e96;outline-offset:-1px}
.icicle .fr.k-library{color:#495057;font-style:italic}
.k-more{background:repeating-linear-gradient(135deg,#f1f3f5 0 5px,#dee2e6 5px 10px);color:#495057}
.icicle .fr.ancestor{opacity:.6}
.icicle.searching .fr{opacity:.35}.icicle.searching .fr.match{opacity:1;background:#ffd43b;font-weight:600}
ul.flame-legend{list-style:none;padding:0;margin:6px 0;display:flex;flex-wrap:wrap;gap:4px 14px;font-size:12px}
ul.flame-legend .box{display:inline-block;width:14px;height:11px;border-radius:2px;margin-right:4px;vertical-align:-1px}
.flame-detail{border:1px solid var(--line);border-radius:6px;padding:4px 12px;margin:8px 0}
.flame-detail h4{font-size:13px;margin:6px 0}
"""

# Draws each section.flame's icicles from its JSON block, and adds the search box and the click
# panel. Every string of the user's goes in by textContent.
FLAME_JS = """
(function(){
var ROW=19,MIN=0.0005,LISTED=100;
function fmt(n){if(n<1024)return n+' B';var p=1;while(p<4&&n>=Math.pow(1024,p+1))p++;var s=Math.pow(1024,p);
var t=Math.floor((n*10+Math.floor(s/2))/s);return Math.floor(t/10)+'.'+(t%10)+' '+['KiB','MiB','GiB','TiB'][p-1];}
function pct(part,whole){return whole?(100*part/whole).toFixed(1)+' %':'—';}
function el(tag,cls,text){var e=document.createElement(tag);if(cls)e.className=cls;if(text!=null)e.textContent=text;return e;}
function build(a,parent){var n={name:a[0],search:a[1]===0?a[0]:a[1],kind:a[2],bytes:a[3],pad:a[4],kids:[],src:a[6],parent:parent,
depth:parent?parent.depth+1:0};n.low=n.search.toLowerCase();for(var i=0;i<a[5].length;i++)n.kids.push(build(a[5][i],n));return n;}
function each(n,f){f(n);n.kids.forEach(function(k){each(k,f);});}
document.querySelectorAll('section.flame').forEach(function(sec){
var block=document.getElementById(sec.getAttribute('data-json'));if(!block)return;
var data=JSON.parse(block.textContent),panels=[],query='';
var nojs=sec.querySelector('.flame-nojs');if(nojs)nojs.remove();
var detail=sec.querySelector('.flame-detail');
function title(p,n){var t=(n.kind==='root'?'live peak':n.name)+(n.search!==n.name&&n.search?'\\n'+n.search:'')+
'\\n'+fmt(n.bytes)+' · '+pct(n.bytes,p.root.bytes)+' of the '+p.v.label+' live peak';
if(n.pad)t+='\\npadding '+fmt(n.pad);if(n.kind==='library')t+='\\n(library code)';return t;}
function put(p,n,left,width,extra){var d=el('div','fr k-'+n.kind+(extra||''),n.kind==='root'?'live peak '+fmt(n.bytes):n.name);
d.style.left=(100*left)+'%';d.style.width=(100*width)+'%';d.style.top=(n.depth*ROW)+'px';d.title=title(p,n);
d.tabIndex=0;d.setAttribute('role','button');d.setAttribute('data-bytes',n.bytes);d.setAttribute('data-depth',n.depth);
d._node=n;if(n.match)d.className+=' match';p.el.appendChild(d);p.divs.push(d);if(n.depth>p.deepest)p.deepest=n.depth;return d;}
function lay(p,n,left,width,scale){var x=left;n.kids.forEach(function(k){var w=k.bytes/scale;
if(w>=MIN){put(p,k,x,w);lay(p,k,x,w,scale);}else p.skipped++;x+=w;});}
function draw(p){p.el.textContent='';p.divs=[];p.deepest=0;p.skipped=0;var z=p.zoom;
var scale=z===p.root?data.scale:Math.max(z.bytes,1);
for(var a=z.parent;a;a=a.parent)put(p,a,0,1,' ancestor');
var w=z.bytes/scale;put(p,z,0,w);lay(p,z,0,w,scale);
p.el.style.height=((p.deepest+1)*ROW+1)+'px';p.el.classList.toggle('searching',!!query);}
function show(p,n){var found=[],more=0,moreBytes=0;
each(n,function(m){m.src.forEach(function(i){var s=p.v.sources[i];
s[2].forEach(function(b){found.push([b[0],b[1],b[2],b[3],b[4],s[0]]);});more+=s[3];moreBytes+=s[4];});});
found.sort(function(a,b){return b[0]-a[0];});detail.textContent='';detail.hidden=false;
detail.setAttribute('data-variant',p.v.variant);detail.setAttribute('data-bytes',n.bytes);
detail.appendChild(el('h4',null,p.v.label+' · '+(n.kind==='root'?'live peak':n.name)+': '+fmt(n.bytes)+', '+
pct(n.bytes,p.root.bytes)+' of its live peak'+(n.pad?', padding '+fmt(n.pad):'')));
var table=el('table','flame-buffers'),head=el('tr');
['bytes','kind','shape','instruction','padding','source'].forEach(function(h,i){head.appendChild(el('th',i===0||i===4?'num':null,h));});
table.appendChild(el('thead')).appendChild(head);var body=table.appendChild(el('tbody'));
found.slice(0,LISTED).forEach(function(b){var r=el('tr');r.appendChild(el('td','num',fmt(b[0])));
r.appendChild(el('td',null,null)).appendChild(el('span','kind '+b[1],b[1]));r.appendChild(el('td','shape',b[3]));
r.appendChild(el('td',null,null)).appendChild(el('code',null,b[2]));r.appendChild(el('td','num',b[4]?fmt(b[4]):''));
r.appendChild(el('td','src',b[5]));body.appendChild(r);});detail.appendChild(table);
if(n.kind==='more')detail.appendChild(el('p','muted','The buffers of these '+n.name.slice(2)+' frames are not on this page; the JSON report has them.'));
var rest=found.length-Math.min(found.length,LISTED);
if(rest||more){var left=found.slice(LISTED).reduce(function(s,b){return s+b[0];},0)+moreBytes;
detail.appendChild(el('p','muted','… '+(rest+more)+' more buffers ('+fmt(left)+') not listed here; the JSON report has them all.'));}}
function search(){query=box.value.toLowerCase().trim();var words=[];
panels.forEach(function(p){var bytes=0,frames=0;
each(p.root,function(n){n.match=!!query&&n.low.indexOf(query)>=0;if(n.match){frames++;var a=n.parent,under=false;
for(;a;a=a.parent)if(a.match)under=true;if(!under)bytes+=n.bytes;}});
p.found=bytes;p.el.classList.toggle('searching',!!query);
p.divs.forEach(function(d){d.classList.toggle('match',!!d._node.match);});
words.push(p.v.variant+': '+(frames?fmt(bytes)+', '+pct(bytes,p.root.bytes)+' of the live peak ('+frames+(frames>1?' frames)':' frame)'):'no match'));
result.setAttribute('data-'+p.v.variant,query?bytes:'');});
result.textContent=query?'matched: '+words.join(' · '):'';}
var controls=sec.querySelector('.flame-controls');
var box=el('input');box.type='search';box.placeholder='search frames: file, line, function or path';
box.setAttribute('aria-label','search the flame graph');var result=el('span','flame-found muted');
controls.appendChild(box);controls.appendChild(result);box.addEventListener('input',search);
data.variants.forEach(function(v){var holder=sec.querySelector('.flame-panel[data-variant="'+v.variant+'"] .icicle');
if(!holder)return;var root=build(v.root,null);var p={v:v,root:root,zoom:root,el:holder,divs:[]};panels.push(p);draw(p);
function pick(e){var d=e.target.closest('.fr');if(!d)return;var n=d._node;
p.zoom=n===p.root?p.root:(n.kids.length?n:n.parent||p.root);
draw(p);show(p,n);}
holder.addEventListener('click',pick);
holder.addEventListener('keydown',function(e){if(e.key==='Enter'||e.key===' '){e.preventDefault();pick(e);}});});
});
})();
"""
