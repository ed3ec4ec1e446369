# Issue 47 study (benchmarks/results/gate-reads.md): a worker-only sitecustomize (PYTHONPATH) that sums the
# main thread's time in the worker's stages, and the compile gate's (enter, exit, each read by thread), into $OV_ACC.
import sys, os, time, importlib.abc, importlib.machinery, threading, functools, collections
if os.environ.get('OV_ACC') and any('fieldmem.worker.main' in a for a in sys.orig_argv):
    ACC = collections.defaultdict(lambda: [0, 0.0])
    MAIN = threading.main_thread()
    def timed(key, fn):
        @functools.wraps(fn)
        def w(*a, **k):
            if threading.current_thread() is not MAIN and not key.startswith(ALL):
                return fn(*a, **k)
            t = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                e = ACC[key]; e[0] += 1; now = time.perf_counter(); e[1] += now - t
                if key in ENDS: ENDS[key].append(now)
        return w
    ALL = ('lowering:compile_lowered', 'lowering:_compile_early', 'early:', 'dumps:', 'dumped:')
    ENDS = {'lowering:compile_lowered': [], 'lowering:PendingVariants._compile': []}
    GATES = []
    WRAP = {
        'fieldmem.driver.compile_memory': [],
        'fieldmem.driver.early': ['compile_until_assigned', 'scratch', '_from_dump', '_Request.compile', '_Watch.__init__', '_Watch.wait', '_lowest_priority', '_stand_in'],
        'fieldmem.driver.dumps': ['remember_dumped'],
        'fieldmem.driver.dumped': ['dumped_stats'],
        'fieldmem.worker.local_readers': ['LocalHands.prepare', 'LocalHands.start', 'LocalHands.plain', 'LocalHands.variants', 'LocalHands.release', 'LocalHands.call_shape', 'LocalHands.environment'],
        'fieldmem.driver.lowering': ['compile_lowered', '_compile_early', 'lower', '_compiled', 'fresh_function', 'PendingVariants.__init__', 'PendingVariants._compile'],
        'fieldmem.driver.variant': ['read_variant'],
        'fieldmem.model.codec': ['dumps'],
        'fieldmem.worker.serve': ['_serve_job', 'serve_items'],
        'fieldmem.worker.readers': ['compile_pool'],
        'fieldmem.request.target': ['describe_target'],
        'concurrent.futures.thread': ['ThreadPoolExecutor.submit', 'ThreadPoolExecutor.shutdown'],
    }
    def patch(mod):
        if mod.__name__ == 'fieldmem.driver.compile_memory': patch_gate(mod)
        for path in WRAP.get(mod.__name__, ()):
            obj = mod
            parts = path.split('.')
            for p in parts[:-1]: obj = getattr(obj, p)
            f = getattr(obj, parts[-1], None)
            if f is None: continue
            setattr(obj, parts[-1], timed(mod.__name__.split('.')[-1] + ':' + path, f))
    import concurrent.futures.thread as cft; patch(cft)
    _ts = threading.Thread.start
    def tstart(self):
        t = time.perf_counter()
        try: return _ts(self)
        finally:
            e = ACC['Thread.start ' + self.name.split('-')[0] + '-' + (self.name.split('-')[1] if '-' in self.name else '')]; e[0] += 1; e[1] += time.perf_counter() - t
    threading.Thread.start = tstart
    def patch_gate(mod):
        C = mod.CompileGate; orig = C.compiling
        import contextlib
        @contextlib.contextmanager
        def compiling(self):
            cm = orig(self); t = time.perf_counter()
            cm.__enter__()
            e = ACC['gate enter']; e[0] += 1; e[1] += time.perf_counter() - t
            try:
                yield
            except BaseException:
                t = time.perf_counter()
                if not cm.__exit__(*sys.exc_info()): raise
            else:
                t = time.perf_counter(); cm.__exit__(None, None, None)
            e = ACC['gate exit']; e[0] += 1; e[1] += time.perf_counter() - t
        C.compiling = compiling
        G = mod.GATE
        GATES.append(G)
        for attr in ('_available', '_resident'):
            f = getattr(G, attr)
            def w(f=f, attr=attr):
                t = time.perf_counter()
                try: return f()
                finally:
                    e = ACC['gate ' + attr + ' ' + threading.current_thread().name.split('-')[0][:12]]; e[0] += 1; e[1] += time.perf_counter() - t
            setattr(G, attr, w)
    class Finder(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if name not in WRAP: return None
            for f in sys.meta_path:
                if f is self: continue
                spec = f.find_spec(name, path, target) if hasattr(f, 'find_spec') else None
                if spec is not None:
                    orig = spec.loader.exec_module
                    def exec_module(module, orig=orig):
                        orig(module); patch(module)
                    spec.loader.exec_module = exec_module
                    return spec
            return None
    sys.meta_path.insert(0, Finder())
    _oe = os._exit
    def _exit(c):
        with open(os.environ['OV_ACC'], 'w') as f:
            for k, (n, s) in sorted(ACC.items(), key=lambda kv: -kv[1][1]):
                f.write(f'{s:8.3f} {n:5d} {k}\n')
            for G in GATES: f.write(f'gate waited {G.waited} per_compile {G.per_compile}\n')
            a = ENDS['lowering:compile_lowered']; b = ENDS['lowering:PendingVariants._compile']
            f.write(f'ends {len(a)} {len(b)}\n')
            if len(a) == len(b):
                d = sorted(y - x for x, y in zip(a, b)); f.write(f'handoff sum {sum(d):.3f} median {d[len(d)//2]*1000:.2f} ms max {d[-1]*1000:.1f}\n')
        _oe(c)
    os._exit = _exit
if os.environ.get('OV_SWITCH') and any('fieldmem.worker.main' in a for a in sys.orig_argv):
    sys.setswitchinterval(float(os.environ['OV_SWITCH']))
