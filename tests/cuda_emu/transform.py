#!/usr/bin/env python3
"""Turns a CUDA source (kernels/cuda/*.cu, *.cuh) into C++ for the CPU emulator of CUDA (docs/cuda-emulator.md).

    transform.py INPUT OUTPUT

Rewrites, keeping every line where it was (a #line directive maps the output back to the .cu file):
  - `k<<<grid, block[, smem[, stream]]>>>(args)` into `::cuda_emu::launch(loc, k, config, args)`;
  - `__shared__ T name[...]` into a reference to block-shared storage (one per block and declaration);
    `extern __shared__ T name[]` into a pointer to the block's dynamic shared memory;
  - the body of every `__global__` function starts with CUDA_EMU_KERNEL_ENTRY(<its __launch_bounds__>);
  - each inline `asm(...)` statement into calls of the emulator's PTX operations, by its instructions.
An asm the emulator does not implement, or a construct the transformer cannot parse, stops the build with
`file:line: error: ...`.
"""
import os
import re
import sys


class TransformError(Exception):
    pass


# ---- lexing helpers ------------------------------------------------------------------------------------------

def mask(src):
    """The source with comments and the insides of string/char literals blanked (same length, newlines kept)."""
    out = list(src)
    i, n = 0, len(src)

    def blank(a, b):
        for k in range(a, b):
            if out[k] != '\n':
                out[k] = ' '

    while i < n:
        c = src[i]
        if src.startswith('//', i):
            j = src.find('\n', i)
            j = n if j < 0 else j
            blank(i, j)
            i = j
        elif src.startswith('/*', i):
            j = src.find('*/', i + 2)
            j = n if j < 0 else j + 2
            blank(i, j)
            i = j
        elif c == 'R' and src.startswith('R"', i) and (i == 0 or not (src[i - 1].isalnum() or src[i - 1] == '_')):
            m = re.match(r'R"([^(\s]*)\(', src[i:])
            if not m:
                i += 1
                continue
            end = src.find(')' + m.group(1) + '"', i)
            end = n if end < 0 else end + len(m.group(1)) + 2
            blank(i + 1, end)
            i = end
        elif c == '"' or (c == "'" and not (i > 0 and src[i - 1].isalnum())):
            j = i + 1
            while j < n and src[j] != c:
                j += 2 if src[j] == '\\' else 1
            blank(i + 1, j)
            i = j + 1
        else:
            i += 1
    return ''.join(out)


def match_forward(m, i, open_c, close_c):
    """Index just past the bracket matching m[i] == open_c (other bracket kinds tracked too)."""
    assert m[i] == open_c
    pairs = {'(': ')', '[': ']', '{': '}'}
    stack = []
    j = i
    while j < len(m):
        c = m[j]
        if c in pairs:
            stack.append(pairs[c])
        elif c in ')]}':
            if not stack or stack[-1] != c:
                raise TransformError('unbalanced brackets')
            stack.pop()
            if not stack:
                return j + 1
        j += 1
    raise TransformError('unbalanced brackets')


def split_top(text, mtext, sep):
    """Splits text at occurrences of `sep` (one char) outside (), [], {} using the masked twin mtext."""
    parts, depth, last = [], 0, 0
    for j, c in enumerate(mtext):
        if c in '([{':
            depth += 1
        elif c in ')]}':
            depth -= 1
        elif c == sep and depth == 0:  # in an asm statement `::` at depth 0 is two separators
            parts.append((text[last:j], mtext[last:j]))
            last = j + 1
    parts.append((text[last:], mtext[last:]))
    return parts


def line_of(src, pos):
    return src.count('\n', 0, pos) + 1


def c_unescape(lit):
    out, i = [], 0
    esc = {'n': '\n', 't': '\t', '\\': '\\', '"': '"', "'": "'", 'r': '\r', '0': '\0'}
    while i < len(lit):
        if lit[i] == '\\' and i + 1 < len(lit):
            out.append(esc.get(lit[i + 1], lit[i + 1]))
            i += 2
        else:
            out.append(lit[i])
            i += 1
    return ''.join(out)


def one_line(text):
    """Generated code goes on one line; the caller pads the newlines the replaced text had."""
    return ' '.join(text.split('\n'))


# ---- inline asm ------------------------------------------------------------------------------------------------

OUT_TYPES = {'r': 'uint32_t', 'l': 'uint64_t', 'f': 'float', 'd': 'double', 'h': 'uint16_t'}


class Operand:
    def __init__(self, constraint, expr, is_output):
        self.constraint = constraint
        self.expr = expr.strip()
        self.is_output = is_output
        mods = constraint.lstrip('=+&')
        self.inout = constraint.startswith('+')
        if not mods or mods[0] not in 'rlfdhn':
            raise TransformError('asm operand constraint "%s" is not supported by the emulator' % constraint)
        self.kind = mods[0]


def parse_asm_operands(text, mtext, is_output):
    ops = []
    if not mtext.strip():
        return ops
    for t, mt in split_top(text, mtext, ','):
        m = re.match(r'\s*"([^"]*)"\s*\((.*)\)\s*$', t, re.S)
        if not m:
            raise TransformError('cannot parse asm operand `%s`' % t.strip())
        ops.append(Operand(m.group(1), m.group(2), is_output))
    return ops


def ptx_operands(text):
    """Splits a PTX operand list at top-level commas ({} and [] group)."""
    parts, depth, cur = [], 0, ''
    for c in text:
        if c in '{[':
            depth += 1
        elif c in '}]':
            depth -= 1
        if c == ',' and depth == 0:
            parts.append(cur.strip())
            cur = ''
        else:
            cur += c
    if cur.strip():
        parts.append(cur.strip())
    return parts


class AsmGen:
    """Generates the C++ for one asm statement."""

    def __init__(self, ops):
        self.ops = ops
        self.pre = []   # evaluation of the operands
        self.body = []  # the emulated instructions
        self.post = []  # stores of the outputs
        self.preds = set()  # predicate registers declared in a { .reg .pred p; ... } block
        for k, op in enumerate(ops):
            if op.is_output:
                ty = OUT_TYPES.get(op.kind)
                if ty is None:
                    raise TransformError('asm output constraint "%s" is not supported' % op.constraint)
                self.pre.append('auto& cuda_emu_r%d = (%s);' % (k, op.expr))
                if op.inout:
                    self.pre.append('%s cuda_emu_v%d = ::cuda_emu::ptx::in_%s(cuda_emu_r%d);' % (ty, k, op.kind, k))
                else:
                    self.pre.append('%s cuda_emu_v%d{};' % (ty, k))
                self.post.append('::cuda_emu::ptx::out(cuda_emu_r%d, cuda_emu_v%d);' % (k, k))
            elif op.kind == 'n':
                self.pre.append('const int cuda_emu_v%d = int(%s);' % (k, op.expr))
            else:
                self.pre.append('const auto cuda_emu_v%d = ::cuda_emu::ptx::in_%s(%s);' % (k, op.kind, op.expr))

    def ref(self, tok, want_output=None):
        m = re.fullmatch(r'%(\d+)', tok.strip())
        if not m:
            raise TransformError('expected an operand %%N, got `%s`' % tok)
        k = int(m.group(1))
        if k >= len(self.ops):
            raise TransformError('operand %%%d does not exist' % k)
        if want_output and not self.ops[k].is_output:
            raise TransformError('operand %%%d must be an output' % k)
        return 'cuda_emu_v%d' % k

    def value(self, tok):
        tok = tok.strip()
        if re.fullmatch(r'-?(0x[0-9a-fA-F]+|\d+)', tok):
            return tok
        if tok in self.preds:
            return 'cuda_emu_pred_' + tok
        return self.ref(tok)

    def pred(self, tok):
        tok = tok.strip()
        if tok not in self.preds:
            raise TransformError('`%s` is not a predicate declared with .reg .pred in this asm block' % tok)
        return 'cuda_emu_pred_' + tok

    def declare(self, decl):
        m = re.fullmatch(r'\.reg\s+\.pred\s+([A-Za-z_]\w*)', decl.strip())
        if not m:
            raise TransformError('only `.reg .pred NAME` declarations are emulated, got `%s`' % decl.strip())
        self.preds.add(m.group(1))
        self.body.append('bool cuda_emu_pred_%s = false;' % m.group(1))

    def emit_hopper(self, opcode, args, instr, loc):
        """sm_90a: mbarrier, TMA (cp.async.bulk.tensor loads and stores, bulk groups, the async-proxy fence) and
        wgmma; False when `opcode` is none of them."""
        if opcode == 'mbarrier.init.shared::cta.b64':
            self.body.append('::cuda_emu::ptx::mbarrier_init(uint32_t(%s), uint32_t(%s), %s);' %
                             (self.address(args[0]), self.value(args[1]), loc))
        elif opcode == 'mbarrier.arrive.expect_tx.shared::cta.b64':
            if len(args) != 3 or args[0].strip() != '_':
                raise TransformError('mbarrier.arrive.expect_tx is emulated as `_, [bar], bytes` only')
            self.body.append('::cuda_emu::ptx::mbarrier_arrive_expect_tx(uint32_t(%s), uint32_t(%s), %s);' %
                             (self.address(args[1]), self.value(args[2]), loc))
        elif opcode == 'mbarrier.arrive.shared::cta.b64':
            if len(args) != 2 or args[0].strip() != '_':
                raise TransformError('mbarrier.arrive is emulated as `_, [bar]` only')
            self.body.append('::cuda_emu::ptx::mbarrier_arrive_expect_tx(uint32_t(%s), 0u, %s);' %
                             (self.address(args[1]), loc))
        elif opcode == 'mbarrier.try_wait.parity.shared::cta.b64':
            self.body.append('%s = ::cuda_emu::ptx::mbarrier_try_wait_parity(uint32_t(%s), uint32_t(%s), %s);' %
                             (self.pred(args[0]), self.address(args[1]), self.value(args[2]), loc))
        elif opcode == 'fence.mbarrier_init.release.cluster':
            self.body.append('::cuda_emu::ptx::fence_mbarrier_init(%s);' % loc)
        elif re.fullmatch(r'cp\.async\.bulk\.tensor\.[1-5]d\.shared::cluster\.global\.mbarrier::complete_tx::bytes',
                          opcode):
            rank = int(opcode.split('.')[4][0])
            m = re.fullmatch(r'\[\s*(%\d+)\s*,\s*\{([^}]*)\}\s*\]', args[1].strip()) if len(args) == 3 else None
            coords = [c.strip() for c in m.group(2).split(',')] if m else []
            if not m or len(coords) != rank or not all(re.fullmatch(r'%\d+', c) for c in coords):
                raise TransformError('cp.async.bulk.tensor.%dd is emulated as `[dst], [map, {c0, ..}], [bar]` with '
                                     '%d coordinates only' % (rank, rank))
            self.body.append('{ const int32_t cuda_emu_tc[%d] = {%s}; ::cuda_emu::ptx::tma_load(uint32_t(%s), '
                             'uint64_t(%s), %d, cuda_emu_tc, uint32_t(%s), %s); }' %
                             (rank, ', '.join('int32_t(%s)' % self.ref(c) for c in coords), self.address(args[0]),
                              self.ref(m.group(1)), rank, self.address(args[2]), loc))
        elif re.fullmatch(r'cp\.async\.bulk\.tensor\.[3-5]d\.shared::cluster\.global\.im2col\.'
                          r'mbarrier::complete_tx::bytes', opcode):
            rank = int(opcode.split('.')[4][0])
            m = re.fullmatch(r'\[\s*(%\d+)\s*,\s*\{([^}]*)\}\s*\]', args[1].strip()) if len(args) == 4 else None
            o = re.fullmatch(r'\{([^}]*)\}', args[3].strip()) if len(args) == 4 else None
            coords = [c.strip() for c in m.group(2).split(',')] if m else []
            offsets = [c.strip() for c in o.group(1).split(',')] if o else []
            if (not m or not o or len(coords) != rank or len(offsets) != rank - 2 or
                    not all(re.fullmatch(r'%\d+', c) for c in coords + offsets)):
                raise TransformError('cp.async.bulk.tensor.%dd (im2col) is emulated as `[dst], [map, {c0, ..}], [bar], '
                                     '{o0, ..}` with %d coordinates and %d offsets only' % (rank, rank, rank - 2))
            self.body.append('{ const int32_t cuda_emu_tc[%d] = {%s}; const uint16_t cuda_emu_to[%d] = {%s}; '
                             '::cuda_emu::ptx::tma_load_im2col(uint32_t(%s), uint64_t(%s), %d, cuda_emu_tc, '
                             'cuda_emu_to, uint32_t(%s), %s); }' %
                             (rank, ', '.join('int32_t(%s)' % self.ref(c) for c in coords), rank - 2,
                              ', '.join('uint16_t(%s)' % self.ref(c) for c in offsets), self.address(args[0]),
                              self.ref(m.group(1)), rank, self.address(args[2]), loc))
        elif re.fullmatch(r'cp\.async\.bulk\.tensor\.[1-5]d\.global\.shared::cta\.bulk_group', opcode):
            rank = int(opcode.split('.')[4][0])
            m = re.fullmatch(r'\[\s*(%\d+)\s*,\s*\{([^}]*)\}\s*\]', args[0].strip()) if len(args) == 2 else None
            coords = [c.strip() for c in m.group(2).split(',')] if m else []
            if not m or len(coords) != rank or not all(re.fullmatch(r'%\d+', c) for c in coords):
                raise TransformError('cp.async.bulk.tensor.%dd (store) is emulated as `[map, {c0, ..}], [src]` with %d '
                                     'coordinates only' % (rank, rank))
            self.body.append('{ const int32_t cuda_emu_tc[%d] = {%s}; ::cuda_emu::ptx::tma_store(uint64_t(%s), %d, '
                             'cuda_emu_tc, uint32_t(%s), %s); }' %
                             (rank, ', '.join('int32_t(%s)' % self.ref(c) for c in coords), self.ref(m.group(1)), rank,
                              self.address(args[1]), loc))
        elif opcode == 'cp.async.bulk.commit_group':
            self.body.append('::cuda_emu::ptx::bulk_commit_group(%s);' % loc)
        elif opcode in ('cp.async.bulk.wait_group.read', 'cp.async.bulk.wait_group'):
            self.body.append('::cuda_emu::ptx::bulk_wait_group(int(%s), %s);' % (self.value(args[0]), loc))
        elif opcode in ('setmaxnreg.inc.sync.aligned.u32', 'setmaxnreg.dec.sync.aligned.u32'):
            if len(args) != 1:
                raise TransformError('setmaxnreg takes one operand, got `%s`' % instr.strip())
            # registers are not modelled: the emulator checks the operand (a multiple of 8 in [24, 256])
            self.body.append('::cuda_emu::ptx::setmaxnreg(int(%s), %s);' % (self.value(args[0]), loc))
        elif opcode == 'fence.proxy.async.shared::cta':
            self.body.append('::cuda_emu::ptx::fence_proxy_async(%s);' % loc)
        elif opcode == 'wgmma.fence.sync.aligned':
            self.body.append('::cuda_emu::ptx::wgmma_fence(%s);' % loc)
        elif opcode == 'wgmma.commit_group.sync.aligned':
            self.body.append('::cuda_emu::ptx::wgmma_commit_group(%s);' % loc)
        elif opcode == 'wgmma.wait_group.sync.aligned':
            self.body.append('::cuda_emu::ptx::wgmma_wait_group(int(%s), %s);' % (self.value(args[0]), loc))
        elif opcode.startswith('wgmma.mma_async'):
            m = re.fullmatch(r'wgmma\.mma_async\.sync\.aligned\.m64n(\d+)k16\.f32\.(bf16|f16)\.(bf16|f16)', opcode)
            if not m or m.group(2) != m.group(3) or len(args) != 8:
                raise TransformError('only wgmma.mma_async.sync.aligned.m64nNk16.f32.{bf16,f16} with shared-memory '
                                     'descriptors for A and B is emulated, got `%s`' % instr.strip())
            n = int(m.group(1))
            if n % 8 or not 8 <= n <= 256:
                raise TransformError('wgmma n must be a multiple of 8 in [8, 256], got %d' % n)
            d = self.vector(args[0], n // 2, output=True)
            # the accumulators are written when a wgmma.wait_group covers the operation: their addresses
            self.body.append('{ float* cuda_emu_wd[%d] = {%s}; ::cuda_emu::ptx::wgmma_m64nNk16(%d, %d, cuda_emu_wd, '
                             'uint64_t(%s), uint64_t(%s), bool(%s), int(%s), int(%s), int(%s), int(%s), %s); }' %
                             (n // 2, ', '.join('&cuda_emu_r%s' % x[len('cuda_emu_v'):] for x in d), n,
                              1 if m.group(2) == 'bf16' else 0, self.value(args[1]), self.value(args[2]),
                              self.value(args[3]), self.value(args[4]), self.value(args[5]), self.value(args[6]),
                              self.value(args[7]), loc))
            # the accumulators are not copied in or out here: the wait writes them through their addresses
            for x in d:
                k = x[len('cuda_emu_v'):]
                self.post = [q for q in self.post if q != '::cuda_emu::ptx::out(cuda_emu_r%s, cuda_emu_v%s);' % (k, k)]
                self.pre = [q for q in self.pre if not q.startswith('float cuda_emu_v%s = ' % k)]
        else:
            return False
        return True

    def vector(self, tok, n, output=False):
        m = re.fullmatch(r'\{(.*)\}', tok.strip(), re.S)
        if not m:
            raise TransformError('expected a vector operand {...}, got `%s`' % tok)
        items = [t.strip() for t in m.group(1).split(',')]
        if len(items) != n:
            raise TransformError('expected %d registers in `%s`' % (n, tok))
        return [self.ref(t, want_output=output) for t in items]

    def address(self, tok):
        m = re.fullmatch(r'\[\s*(%\d+)\s*(?:\+\s*(-?\d+|0x[0-9a-fA-F]+))?\s*\]', tok.strip())
        if not m:
            raise TransformError('expected an address [%%N(+imm)], got `%s`' % tok)
        base = self.ref(m.group(1))
        return '(%s + %s)' % (base, m.group(2)) if m.group(2) else base

    def emit(self, instr):
        m = re.match(r'\s*([A-Za-z_][\w.:]*)\s*(.*)$', instr, re.S)
        if not m:
            raise TransformError('cannot parse the PTX instruction `%s`' % instr.strip())
        opcode, rest = m.group(1), m.group(2)
        if instr.strip().startswith('@'):
            raise TransformError('predicated PTX (`%s`) is not emulated' % instr.strip())
        args = ptx_operands(rest)
        parts = opcode.split('.')
        loc = '::cuda_emu::Loc::current()'
        if self.emit_hopper(opcode, args, instr, loc):
            return
        if parts[0] == 'cp' and len(parts) > 1 and parts[1] == 'async':
            sub = parts[2] if len(parts) > 2 else ''
            if sub == 'commit_group':
                self.body.append('::cuda_emu::ptx::cp_async_commit_group(%s);' % loc)
            elif sub == 'wait_group':
                self.body.append('::cuda_emu::ptx::cp_async_wait_group(%s, %s);' % (self.value(args[0]), loc))
            elif sub == 'wait_all':
                self.body.append('::cuda_emu::ptx::cp_async_wait_all(%s);' % loc)
            elif sub in ('ca', 'cg'):
                mods = set(parts[3:])
                if not {'shared', 'global'} <= {p.split('::')[0] for p in mods} or len(args) not in (3, 4):
                    raise TransformError('unsupported cp.async form `%s`' % instr.strip())
                if any(p.startswith('L2::cache_hint') for p in mods):
                    raise TransformError('cp.async with a cache-policy operand is not emulated')
                size = self.value(args[2])
                src_size = self.value(args[3]) if len(args) == 4 else size
                if sub == 'cg' and size != '16' and re.fullmatch(r'\d+', size):
                    raise TransformError('cp.async.cg copies 16 bytes only (got %s)' % size)
                self.body.append('::cuda_emu::ptx::cp_async(uint32_t(%s), uint64_t(%s), int(%s), int(%s), %s);' %
                                 (self.address(args[0]), self.address(args[1]), size, src_size, loc))
            else:
                raise TransformError('PTX `%s` is not emulated' % opcode)
        elif parts[0] == 'ldmatrix':
            mods = set(parts[1:])
            count = {'x1': 1, 'x2': 2, 'x4': 4}
            xs = [count[p] for p in mods if p in count]
            if not {'sync', 'aligned', 'm8n8', 'b16'} <= mods or len(xs) != 1 or \
                    not any(p.split('::')[0] == 'shared' for p in mods) or \
                    mods - {'sync', 'aligned', 'm8n8', 'b16', 'trans', 'x1', 'x2', 'x4', 'shared', 'shared::cta'}:
                raise TransformError('unsupported ldmatrix form `%s`' % opcode)
            n = xs[0]
            regs = self.vector(args[0], n, output=True) if n > 1 or args[0].strip().startswith('{') \
                else [self.ref(args[0], want_output=True)]
            self.body.append('{ uint32_t cuda_emu_t[4]; ::cuda_emu::ptx::ldmatrix(%d, %s, uint32_t(%s), cuda_emu_t, %s); %s }' %
                             (n, 'true' if 'trans' in mods else 'false', self.address(args[1]), loc,
                              ' '.join('%s = cuda_emu_t[%d];' % (r, i) for i, r in enumerate(regs))))
        elif parts[0] == 'mma':
            m2 = re.fullmatch(r'mma\.sync\.aligned\.m16n8k16\.row\.col\.f32\.(bf16|f16)\.(bf16|f16)\.f32', opcode)
            if not m2 or m2.group(1) != m2.group(2):
                raise TransformError('PTX `%s` is not emulated (only mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}.'
                                     '{f16,bf16}.f32)' % opcode)
            if len(args) != 4:
                raise TransformError('mma takes 4 operands')
            d = self.vector(args[0], 4, output=True)
            a = self.vector(args[1], 4)
            b = self.vector(args[2], 2)
            c = self.vector(args[3], 4)
            self.body.append(
                '{ const uint32_t cuda_emu_a[4] = {%s}; const uint32_t cuda_emu_b[2] = {%s}; '
                'const float cuda_emu_c[4] = {%s}; float cuda_emu_d[4]; '
                '::cuda_emu::ptx::mma_m16n8k16_f32(%d, cuda_emu_d, cuda_emu_a, cuda_emu_b, cuda_emu_c, %s); %s }' %
                (', '.join('uint32_t(%s)' % x for x in a), ', '.join('uint32_t(%s)' % x for x in b),
                 ', '.join('float(%s)' % x for x in c), 1 if m2.group(1) == 'bf16' else 0, loc,
                 ' '.join('%s = cuda_emu_d[%d];' % (r, i) for i, r in enumerate(d))))
        elif opcode in ('cvt.rn.bf16x2.f32', 'cvt.rn.f16x2.f32'):
            if len(args) != 3:
                raise TransformError('%s takes 3 operands' % opcode)
            fn = 'cvt_rn_bf16x2_f32' if 'bf16' in opcode else 'cvt_rn_f16x2_f32'
            self.body.append('%s = ::cuda_emu::ptx::%s(%s, %s);' %
                             (self.ref(args[0], want_output=True), fn, self.value(args[1]), self.value(args[2])))
        elif opcode in ('cvt.rn.f16.f32', 'cvt.rn.bf16.f32', 'cvt.f32.f16', 'cvt.f32.bf16'):
            fn = {'cvt.rn.f16.f32': 'cvt_rn_f16_f32', 'cvt.rn.bf16.f32': 'cvt_rn_bf16_f32',
                  'cvt.f32.f16': 'cvt_f32_f16', 'cvt.f32.bf16': 'cvt_f32_bf16'}[opcode]
            self.body.append('%s = ::cuda_emu::ptx::%s(%s);' %
                             (self.ref(args[0], want_output=True), fn, self.value(args[1])))
        elif opcode in ('st.shared.v2.f32', 'st.shared::cta.v2.f32'):
            if len(args) != 2:
                raise TransformError('%s takes 2 operands' % opcode)
            x, y = self.vector(args[1], 2)
            self.body.append('::cuda_emu::ptx::st_shared_v2_f32(uint32_t(%s), float(%s), float(%s), %s);' %
                             (self.address(args[0]), x, y, loc))
        elif opcode in ('st.shared.b32', 'st.shared::cta.b32'):
            if len(args) != 2:
                raise TransformError('%s takes 2 operands' % opcode)
            self.body.append('::cuda_emu::ptx::st_shared_b32(uint32_t(%s), uint32_t(%s), %s);' %
                             (self.address(args[0]), self.value(args[1]), loc))
        elif opcode == 'red.global.add.v2.f32':
            # sm_90's vector reduction into global memory: two f32 adds, each atomic (atomicAdd's read-modify-write:
            # plain adds on one OS thread, real atomics under racecheck); round to nearest even, as the GPU's (which
            # also flushes subnormals)
            if len(args) != 2:
                raise TransformError('%s takes 2 operands' % opcode)
            x, y = self.vector(args[1], 2)
            self.body.append('{ float* cuda_emu_red = reinterpret_cast<float*>(uintptr_t(%s)); '
                             'atomicAdd(cuda_emu_red, float(%s)); atomicAdd(cuda_emu_red + 1, float(%s)); }' %
                             (self.address(args[0]), x, y))
        elif opcode == 'fence.acq_rel.gpu' and not args:
            # the release/acquire fence of attention v3's turns: where a thread publishes to other blocks, as
            # __threadfence (fence.sc), so another resident block runs here (CUDA_EMU_RESIDENT)
            self.body.append('__threadfence();')
        elif opcode in ('ld.acquire.gpu.global.u32', 'ld.acquire.gpu.global.b32'):
            # an acquire load of a flag another block sets: an atomic load (a spin re-reads it), after which racecheck
            # orders this thread after every fence so far (::cuda_emu::acquire_fences; nothing otherwise)
            if len(args) != 2:
                raise TransformError('%s takes 2 operands' % opcode)
            self.body.append('%s = __atomic_load_n(reinterpret_cast<const uint32_t*>(uintptr_t(%s)), __ATOMIC_ACQUIRE); '
                             '::cuda_emu::acquire_fences();' %
                             (self.ref(args[0], want_output=True), self.address(args[1])))
        elif opcode == 'prefetch.global.L2':
            # a cache hint: the emulator checks the address lies in device memory and records its 128-byte line
            if len(args) != 1:
                raise TransformError('prefetch.global.L2 takes one address operand')
            self.body.append('::cuda_emu::ptx::prefetch_global_l2(uint64_t(%s), %s);' % (self.address(args[0]), loc))
        elif opcode == 'trap' and not args:
            self.body.append('::cuda_emu::ptx::trap(%s);' % loc)
        elif opcode in ('mov.u64', 'mov.b64') and len(args) == 2 and args[1].strip() == '%globaltimer':
            self.body.append('%s = uint64_t(::cuda_emu::clock_ns());' % self.ref(args[0], want_output=True))
        elif opcode in ('mov.u32', 'mov.b32') and len(args) == 2 and args[1].strip() == '%laneid':
            self.body.append('%s = ::cuda_emu::lane_id();' % self.ref(args[0], want_output=True))
        elif opcode == 'setp.ne.b32' and len(args) == 3:
            self.body.append('%s = uint32_t(%s) != uint32_t(%s);' %
                             (self.pred(args[0]), self.value(args[1]), self.value(args[2])))
        elif opcode == 'selp.u32' and len(args) == 4:
            self.body.append('%s = %s ? uint32_t(%s) : uint32_t(%s);' %
                             (self.ref(args[0], want_output=True), self.pred(args[3]), self.value(args[1]),
                              self.value(args[2])))
        else:
            raise TransformError('PTX `%s` is not emulated: add it to tests/cuda_emu (transform.py and the '
                                 'runtime) with its PTX ISA semantics' % opcode)

    def code(self):
        return '{ ' + ' '.join(self.pre + self.body + self.post) + ' }'


def asm_statement(src, msrc, start, open_paren, close_paren):
    inner, minner = src[open_paren + 1:close_paren - 1], msrc[open_paren + 1:close_paren - 1]
    sections = split_top(inner, minner, ':')
    if len(sections) > 4:
        raise TransformError('asm goto is not emulated')
    lits = re.findall(r'"((?:[^"\\]|\\.)*)"', sections[0][0])
    if re.sub(r'"((?:[^"\\]|\\.)*)"', '', sections[0][0]).strip():
        raise TransformError('the asm template must be string literals')
    template = c_unescape(''.join(lits))
    outs = parse_asm_operands(*sections[1], True) if len(sections) > 1 else []
    ins = parse_asm_operands(*sections[2], False) if len(sections) > 2 else []
    if '[' in ''.join(o.constraint for o in outs + ins):
        raise TransformError('symbolic asm operand names are not supported')
    if outs or ins:  # extended asm: `%%` is a literal `%` (special registers: %%globaltimer)
        template = template.replace('%%', '%')
    gen = AsmGen(outs + ins)
    body = template.strip()
    block = body.startswith('{')
    if block:  # { .reg .pred p; instructions; }: one scope with local predicate registers
        if not body.endswith('}'):
            raise TransformError('a PTX block must end with `}`: `%s`' % body)
        body = body[1:-1]
    instrs = [s for s in (x.strip() for x in body.split(';')) if s]
    if not instrs:  # asm volatile("" : "+f"(x) :: "memory"): a compiler barrier (its operands untouched)
        return '{ std::atomic_signal_fence(std::memory_order_seq_cst); %s}' % ''.join(
            '(void)(%s); ' % op.expr for op in outs + ins)
    for ins_text in instrs:
        if ins_text.startswith('.reg'):
            if not block:
                raise TransformError('a .reg declaration outside a { } block: `%s`' % ins_text)
            gen.declare(ins_text)
            continue
        if ins_text.startswith('{'):
            raise TransformError('nested PTX blocks are not emulated: `%s`' % ins_text)
        gen.emit(ins_text)
    return gen.code()


# ---- __shared__ ------------------------------------------------------------------------------------------------

IDENT = re.compile(r'[A-Za-z_]\w*')


def shared_declaration(src, msrc, kw_pos, line):
    """Returns (start, end, replacement) for the declaration that contains the __shared__ at kw_pos."""
    # Qualifiers before __shared__ (extern, static, volatile, __align__(n)) back to the statement start.
    window_start = max(0, kw_pos - 400)
    q = re.search(r'(?:\s|\b(?:extern|static|volatile)\b|(?:__align__|alignas)\s*\(\s*\d+\s*\))*$',
                  msrc[window_start:kw_pos])
    start = window_start + q.start()
    if start > 0 and msrc[start - 1] not in ';{}\n\t ':
        raise TransformError('__shared__ must start a declaration statement')
    while msrc[start].isspace():
        start += 1
    end = msrc.find(';', kw_pos)
    if end < 0:
        raise TransformError('__shared__ declaration without `;`')
    decl = src[start:end]
    if '"' in msrc[start:end]:
        raise TransformError('cannot parse the __shared__ declaration')
    aligns = [int(x) for x in re.findall(r'(?:__align__|alignas)\s*\(\s*(\d+)\s*\)', decl)]
    is_extern = re.search(r'\bextern\b', src[start:kw_pos]) is not None
    text = re.sub(r'(?:__align__|alignas)\s*\(\s*\d+\s*\)|\b__shared__\b|\bstatic\b|\bextern\b', ' ', mask(decl))
    # The first declarator: an identifier at depth 0 followed by `[`, `,` or the end, after the type.
    depth, angle, first = 0, 0, None
    toks = list(re.finditer(r'[A-Za-z_]\w*|::|[<>\[\](),]|\S', text))
    for k, t in enumerate(toks):
        s = t.group(0)
        if s in '([':
            depth += 1
        elif s in ')]':
            depth -= 1
        elif s == '<' and depth == 0:
            angle += 1
        elif s == '>' and depth == 0:
            angle -= 1
        elif depth == 0 and angle == 0 and IDENT.fullmatch(s) and k > 0:
            nxt = toks[k + 1].group(0) if k + 1 < len(toks) else ''
            if nxt in ('[', ',', ''):
                first = t
                break
    if first is None:
        raise TransformError('cannot find the name in the __shared__ declaration `%s`' % ' '.join(decl.split()))
    ty = ' '.join(text[:first.start()].split())
    declarators = split_top(text[first.start():], text[first.start():], ',')
    align = max(aligns) if aligns else 0
    out = []
    for i, (d, _) in enumerate(declarators):
        m = re.fullmatch(r'\s*([A-Za-z_]\w*)\s*((?:\[[^\]]*\]\s*)*)', d, re.S)
        if not m:
            raise TransformError('cannot parse the __shared__ declarator `%s`' % d.strip())
        name, dims = m.group(1), ' '.join(m.group(2).split())
        tag = '%d_%d' % (line, i)
        if is_extern:
            if not dims.startswith('[]'):
                raise TransformError('extern __shared__ `%s` must be an array of unknown size' % name)
            rest = dims[2:].strip()
            out.append('using cuda_emu_sht_%s = %s%s; cuda_emu_sht_%s* const %s = '
                       'static_cast<cuda_emu_sht_%s*>(::cuda_emu::dynamic_shared());' %
                       (tag, ty, (' ' + rest) if rest else '', tag, name, tag))
        else:
            out.append('static char cuda_emu_shk_%s; using cuda_emu_sht_%s = %s%s; cuda_emu_sht_%s& %s = '
                       '::cuda_emu::shared_var<cuda_emu_sht_%s%s>(&cuda_emu_shk_%s);' %
                       (tag, tag, ty, (' ' + dims) if dims else '', tag, name, tag,
                        (', %d' % align) if align else '', tag))
    return start, end + 1, ' '.join(out)


# ---- __global__ ------------------------------------------------------------------------------------------------

def kernel_entry(src, msrc, kw_pos):
    """Returns (insert_pos, text) for the body of the __global__ function at kw_pos, or None (declaration)."""
    i = kw_pos + len('__global__')
    bounds = None
    while i < len(msrc):
        c = msrc[i]
        if c.isspace():
            i += 1
            continue
        m = IDENT.match(msrc, i)
        if m:
            if m.group(0) == '__launch_bounds__':
                p = msrc.index('(', m.end())
                e = match_forward(msrc, p, '(', ')')
                bounds = ' '.join(src[p + 1:e - 1].split())  # the compiler picks the first argument
                i = e
            else:
                i = m.end()
            continue
        if msrc.startswith('::', i) or c in '*&<>,':
            i += 1 if c != ':' else 2
            continue
        if c == '(':
            e = match_forward(msrc, i, '(', ')')
            k = e
            while k < len(msrc) and msrc[k].isspace():
                k += 1
            if k < len(msrc) and msrc[k] == '{':
                return k + 1, ' CUDA_EMU_KERNEL_ENTRY(%s);' % (bounds if bounds else '0')
            return None
        raise TransformError('cannot parse the __global__ function signature')
    return None


# ---- launches ----------------------------------------------------------------------------------------------

def open_bracket_before(msrc, close_pos, open_ch, close_ch):
    """Index of the bracket that opens the one closing at close_pos (scanning backwards, nesting counted)."""
    depth, k = 0, close_pos
    while k >= 0:
        if msrc[k] == close_ch:
            depth += 1
        elif msrc[k] == open_ch:
            depth -= 1
            if depth == 0:
                break
        k -= 1
    return k


def kernel_expr_start(msrc, pos):
    """Start of the kernel expression that ends just before `<<<` at pos."""
    i = pos
    while True:
        j = i
        while j > 0 and msrc[j - 1].isspace():
            j -= 1
        if j > 0 and msrc[j - 1] == '>':
            j = open_bracket_before(msrc, j - 1, '<', '>')
            while j > 0 and msrc[j - 1].isspace():
                j -= 1
        if j > 0 and msrc[j - 1] == ')':
            return open_bracket_before(msrc, j - 1, '(', ')')
        k = j
        while k > 0 and (msrc[k - 1].isalnum() or msrc[k - 1] == '_'):
            k -= 1
        if k == j:
            raise TransformError('cannot find the kernel before <<<')
        m = k
        while m > 0 and msrc[m - 1].isspace():
            m -= 1
        if msrc[m - 2:m] == '::':
            i = m - 2
            continue
        if m > 0 and msrc[m - 1] == '.':
            i = m - 1
            continue
        if msrc[m - 2:m] == '->':
            i = m - 2
            continue
        return k


def launch(src, msrc, pos):
    start = kernel_expr_start(msrc, pos)
    cfg_end = msrc.find('>>>', pos + 3)
    if cfg_end < 0:
        raise TransformError('<<< without >>>')
    k = cfg_end + 3
    while k < len(msrc) and msrc[k].isspace():
        k += 1
    if k >= len(msrc) or msrc[k] != '(':
        raise TransformError('kernel launch without arguments `(...)` after >>>')
    e = match_forward(msrc, k, '(', ')')
    kernel = src[start:pos]
    config = src[pos + 3:cfg_end]
    args = src[k + 1:e - 1]
    text = '::cuda_emu::launch(::cuda_emu::Loc::current(), %s, ::cuda_emu::LaunchConfig::make(%s)%s)' % (
        kernel, config, (', ' + args) if args.strip() else '')
    return start, e, text


# ---- driver ----------------------------------------------------------------------------------------------------

def transform(src, path):
    msrc = mask(src)
    edits = []  # (start, end, text)

    def fail(pos, what):
        raise TransformError('%s:%d: error: %s' % (path, line_of(src, pos), what))

    for m in re.finditer(r'\b(?:asm|__asm__|__asm)\b(\s*(?:volatile|__volatile__|inline|goto)\b)*\s*\(', msrc):
        p = m.end() - 1
        try:
            e = match_forward(msrc, p, '(', ')')
            k = e
            while k < len(msrc) and msrc[k].isspace():
                k += 1
            if k >= len(msrc) or msrc[k] != ';':
                fail(m.start(), 'asm statement not followed by `;`')
            edits.append((m.start(), k + 1, asm_statement(src, msrc, m.start(), p, e)))
        except TransformError as ex:
            if str(ex).startswith(path):
                raise
            fail(m.start(), 'inline asm: %s' % ex)
    for m in re.finditer(r'\b__shared__\b', msrc):
        try:
            edits.append(shared_declaration(src, msrc, m.start(), line_of(src, m.start())))
        except TransformError as ex:
            fail(m.start(), str(ex))
    for m in re.finditer(r'\b__global__\b', msrc):
        try:
            r = kernel_entry(src, msrc, m.start())
        except (TransformError, ValueError) as ex:
            fail(m.start(), 'kernel signature: %s' % ex)
        if r:
            edits.append((r[0], r[0], r[1]))
    for m in re.finditer(r'<<<', msrc):
        try:
            edits.append(launch(src, msrc, m.start()))
        except TransformError as ex:
            fail(m.start(), 'kernel launch: %s' % ex)

    edits.sort(key=lambda x: (x[0], x[1]))
    for a, b in zip(edits, edits[1:]):
        if a[1] > b[0]:
            fail(b[0], 'overlapping constructs the transformer cannot rewrite together')
    out, last = [], 0
    for s, e, text in edits:
        out.append(src[last:s])
        replaced = src[s:e]
        # Launch replacements keep their own newlines (the config and arguments are copied verbatim).
        pad = replaced.count('\n') - text.count('\n')
        if pad < 0:
            fail(s, 'internal: the rewrite adds lines')
        out.append(text + '\n' * pad)
        last = e
    out.append(src[last:])
    return ''.join(out)


def main():
    if len(sys.argv) != 3:
        sys.exit('usage: transform.py INPUT OUTPUT')
    inp, outp = sys.argv[1], sys.argv[2]
    with open(inp, encoding='utf-8') as f:
        src = f.read()
    try:
        body = transform(src, inp)
    except TransformError as ex:
        msg = str(ex)
        if not msg.startswith(inp):
            msg = '%s: error: %s' % (inp, msg)
        sys.stderr.write('cuda_emu transform: %s\n' % msg)
        sys.exit(1)
    # The #line names the source relative to the checkout (kernels/cuda/gemm.cu): __FILE__ (HPDT_LOG) expands to it,
    # so the preprocessed text is the same in every checkout and ccache's preprocessed mode finds the object another
    # checkout compiled (with the absolute path, a fresh clone compiled gemm_wgmma, conv_wgmma and conv_nhwc again:
    # ~5 of CI's CPU-minutes). The emulator's messages print it as they did (short_file).
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    name = os.path.relpath(os.path.abspath(inp), root)
    if name.startswith('..'):
        name = os.path.abspath(inp)  # (a source outside the checkout keeps its absolute path)
    header = ('// Generated from %s by tests/cuda_emu/transform.py for the CPU emulator of CUDA: do not edit.\n'
              '#include <cuda_runtime.h>\n#line 1 "%s"\n' % (name, name))
    tmp = outp + '.tmp'
    with open(tmp, 'w', encoding='utf-8') as f:
        f.write(header + body)
    os.replace(tmp, outp)


if __name__ == '__main__':
    main()
