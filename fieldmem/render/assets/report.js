
(function(){
var controls=document.getElementById('controls');if(!controls)return;
var rows=[].slice.call(document.querySelectorAll('#summary tbody tr'));
var sections=[].slice.call(document.querySelectorAll('details.target'));
var box=document.createElement('input');box.type='search';box.id='filter';
box.placeholder='filter: target name or verdict';
var count=document.createElement('span');count.className='muted';
function button(label,open){var b=document.createElement('button');b.type='button';b.textContent=label;
b.addEventListener('click',function(){sections.forEach(function(s){if(!s.hidden)s.open=open;});});return b;}
function apply(){var words=box.value.toLowerCase().trim();var shown=0;
function match(el){return !words||el.getAttribute('data-filter').indexOf(words)>=0;}
rows.forEach(function(r){r.hidden=!match(r);});
sections.forEach(function(s){s.hidden=!match(s);if(!s.hidden)shown++;});
count.textContent=shown+' of '+sections.length+' shown';}
box.addEventListener('input',apply);
controls.appendChild(box);controls.appendChild(button('open all',true));controls.appendChild(button('close all',false));
controls.appendChild(count);apply();
document.querySelectorAll('#summary a, p.attention a').forEach(function(a){a.addEventListener('click',function(){
var s=document.getElementById(a.getAttribute('href').slice(1));if(s)s.open=true;});});
if(location.hash){var s=document.getElementById(location.hash.slice(1));if(s&&s.tagName==='DETAILS')s.open=true;}
})();
