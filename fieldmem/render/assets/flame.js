
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
function title(p,n){var t=(n.kind==='root'?'live peak':n.name)+(n.search!==n.name&&n.search?'\n'+n.search:'')+
'\n'+fmt(n.bytes)+' · '+pct(n.bytes,p.root.bytes)+' of the '+p.v.label+' live peak';
if(n.pad)t+='\npadding '+fmt(n.pad);if(n.kind==='library')t+='\n(library code)';return t;}
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
