// The gpuchain dashboard. One feed of record lines (a node's name, a time in µs, a typed
// event) is folded into a view: the loss chart, the timeline, the money, the nodes, the three
// figures. Live, every line is folded as it arrives; in a replay the view is the fold of the
// lines up to the scrubber's time. Pushed over server-sent events: the page never polls.
'use strict';
(() => {
  const $ = (id) => document.getElementById(id);
  const TOKEN = new URLSearchParams(location.hash.slice(1)).get('token') || '';
  const PALETTE = ['#5aa9ff', '#f2a93b', '#3fb68b', '#c678dd', '#e5534b', '#56d4dd', '#d19a66', '#98c379'];
  const WARN = new Set(['gossip_rejected', 'roles_queue_full', 'verdict_dropped', 'api_refused',
    'chain_poll_failed', 'cursor_reset', 'provider_lost', 'fenced', 'tx_failed', 'unknown_job',
    'bid_refused', 'blob_fetch_failed', 'quality_error', 'spot_check_error', 'roles_failed', 'fatal',
    'cursor_not_saved', 'spec_not_saved', 'trainer_inconsistent', 'training_failed']);
  const TIMELINE_SHOWN = 300;
  // A live page may stay open for days: what it keeps is capped, oldest dropped first.
  const KEEP = { points: 20000, timeline: 2000, checkpoints: 1000, chain: 20000 };

  let info = { mode: 'live', title: '', targets: [] };
  let lines = [];          // replay: every line (a live page folds each line and keeps none)
  let live = false;        // the stream has sent everything it held
  let view = fresh();
  let folded = 0;          // lines folded into `view`
  let shownUs = null;      // replay: the scrubber's time
  let playing = false;
  let dirty = true;

  // ---------- the fold -------------------------------------------------------------------
  function fresh() {
    return {
      t0: null, t: 0, lastStep: 0, job: null,
      nodes: new Map(), byAddr: new Map(),
      jobs: new Map(),
      loss: new Map(),
      cps: new Map(),
      timeline: [],
      seenChain: new Set(),
      txByBlock: new Map(),
      money: { budget: 0n, paid: new Map(), slashed: new Map(), fees: 0n, feesTo: new Map(), refund: 0n, completedRefund: null },
      harm: [],            // {t, node, what}: kills and freezes, from the harness
      notice: null, again: null,
      cheats: new Set(), refused: 0, cheatRefused: 0, cheatPaid: 0,
    };
  }

  const short = (a) => (a && a.length > 12 ? `${a.slice(0, 6)}…${a.slice(-4)}` : a || '');
  const name = (v, addr) => v.byAddr.get(String(addr).toLowerCase()) || short(addr);
  const big = (s) => { try { return BigInt(s || '0'); } catch { return 0n; } };
  const add = (m, k, x) => m.set(k, (m.get(k) || 0n) + x);
  function usdc(b) {
    const neg = b < 0n; if (neg) b = -b;
    const s = b.toString().padStart(7, '0');
    let frac = s.slice(-6).replace(/0+$/, ''); if (frac.length < 2) frac = frac.padEnd(2, '0');
    return `${neg ? '-' : ''}${s.slice(0, -6)}.${frac}`;
  }
  const secs = (v, t) => ((t - v.t0) / 1e6).toFixed(1);
  function node(v, n) {
    let x = v.nodes.get(n);
    if (!x) { x = { name: n, roles: [], addr: '', peer: '', step: null, beat: null, error: '', stake: null, rep: null }; v.nodes.set(n, x); }
    return x;
  }
  function job(v, id) {
    let j = v.jobs.get(id);
    if (!j) { j = { id, committee: [], epochs: new Map(), budget: 0n }; v.jobs.set(id, j); }
    return j;
  }
  function cp(v, e) {
    const k = `${e.job_id}/${e.epoch}/${e.step}`;
    let c = v.cps.get(k);
    if (!c) { c = { job: e.job_id, epoch: e.epoch, step: e.step, parent: null, provider: null, status: 'pending', acc: null, prev: null }; v.cps.set(k, c); }
    return c;
  }
  // In time order: live lines of different nodes can arrive a little out of order.
  function note(v, t, text, cls, block) {
    const tl = v.timeline; let i = tl.length;
    while (i > 0 && tl[i - 1].t > t) i -= 1;
    tl.splice(i, 0, { t, text, cls: cls || '', block });
  }
  function voters(v, e) {
    const j = v.jobs.get(e.job_id); const bits = big(e.voters); const out = [];
    if (j) j.committee.forEach((a, i) => { if ((bits >> BigInt(i)) & 1n) out.push(a); });
    return out;
  }
  // The chart shows one job: the newest that trained.
  function jobLoss(v, job) {
    let m = v.loss.get(job);
    if (!m) { m = new Map(); v.loss.set(job, m); }
    return m;
  }
  function lossPoint(v, job, who, step, loss, t, epoch) {
    v.job = job;
    const m = jobLoss(v, job);
    let pts = m.get(who);
    if (!pts) { pts = []; m.set(who, pts); }
    const last = pts[pts.length - 1];
    if (last && last.step === step) return;
    pts.push({ step, loss, t, epoch });
  }
  function providerNodeKnown(v, addr) {
    const n = v.byAddr.get(String(addr).toLowerCase());
    return n && v.nodes.get(n).roles.includes('provider');
  }

  function apply(v, l) {
    const t = l.timestamp_us; const e = l;
    if (v.t0 === null) v.t0 = t;
    v.t = t;
    const me = node(v, l.node);
    if (e.event.startsWith('chain_')) {
      const { node: _n, timestamp_us: _t, ...body } = l;
      const key = JSON.stringify(body);
      if (v.seenChain.has(key)) return;
      v.seenChain.add(key);
    }
    if (WARN.has(e.event) && l.node !== 'harness') me.error = `${e.event.replace(/_/g, ' ')} ${e.reason || e.error || e.rule || ''}`.trim();
    switch (e.event) {
      case 'started':
        Object.assign(me, { roles: e.roles, addr: e.eth_address, peer: e.peer_id });
        v.byAddr.set(String(e.eth_address).toLowerCase(), l.node);
        break;
      case 'chain_job_created': {
        const j = job(v, e.job_id); j.budget = big(e.budget); v.money.budget += j.budget;
        note(v, t, `job ${e.job_id} created: budget ${usdc(j.budget)} USDC`, '', e.block);
        break;
      }
      case 'chain_committee_drawn':
        job(v, e.job_id).committee = e.committee;
        note(v, t, `committee drawn: ${e.committee.map((a) => name(v, a)).join(', ')}`, '', e.block);
        break;
      case 'chain_assigned':
        job(v, e.job_id).epochs.set(e.epoch, { provider: e.provider, start: e.start_step });
        // Every provider that held an epoch has a line in the money table, paid or not.
        if (!v.money.paid.has(name(v, e.provider))) v.money.paid.set(name(v, e.provider), 0n);
        note(v, t, `epoch ${e.epoch}: ${name(v, e.provider)} assigned from step ${e.start_step} at ${usdc(big(e.price_per_step))} USDC a step`, '', e.block);
        break;
      case 'training_started':
        // Records written before the field was fixed say "None" for an honest provider.
        if (e.fault && e.fault !== 'None') v.cheats.add(`${l.node}/${e.job_id}/${e.epoch}`);
        break;
      case 'first_step':
        note(v, t, `${l.node} training: first step ${e.step}, loss ${e.loss.toFixed(3)}`);
        trainingAgain(v, l.node, t);
        // falls through
      case 'step':
        me.step = e.step; v.lastStep = e.step;
        lossPoint(v, e.job_id, l.node, e.step, e.loss, t, e.epoch);
        break;
      case 'heartbeat': {
        const who = name(v, e.provider); const p = node(v, who);
        p.beat = t;
        // A client's own page hears its providers only through their heartbeats.
        if (!providerNodeKnown(v, e.provider)) { p.step = e.step; v.lastStep = Math.max(v.lastStep, e.step); lossPoint(v, e.job_id, who, e.step, e.loss, t, e.epoch); trainingAgain(v, who, t); }
        break;
      }
      case 'provider_lost': {
        const who = name(v, e.provider);
        const h = [...v.harm].reverse().find((x) => x.node === who && x.t <= t);
        const how = h ? `${((t - h.t) / 1000).toFixed(0)} ms after ${h.what}` : `silent for ${e.silent_for_ms} ms`;
        // A stalled provider still heartbeats, but its step stopped moving.
        note(v, t, e.reason === 'stalled'
          ? `${who} stalled: heartbeating but no step for ${e.silent_for_ms} ms, noticed by the client's progress check`
          : `${who} lost: noticed by the client's heartbeat detector, ${how}`, 'bad');
        if (!v.notice) v.notice = h ? { us: t - h.t, who, what: h.what } : { us: e.silent_for_ms * 1000, who, what: 'went silent' };
        // Without a record of what happened to it, it went down when it went silent.
        if (!h) v.harm.push({ t: t - e.silent_for_ms * 1000, node: who, what: 'went silent' });
        break;
      }
      case 'checkpoint_announced': {
        const c = cp(v, e); c.parent = e.parent_step; c.provider = l.node;
        if (v.cheats.has(`${l.node}/${e.job_id}/${e.epoch}`)) c.cheat = true;
        // A cheat armed from the break-it controls is for this one checkpoint.
        if (v.cheats.delete(`${l.node}/*`)) c.cheat = true;
        break;
      }
      case 'quality_test': {
        const c = cp(v, e); if (c.acc === null) { c.acc = e.accuracy; c.prev = e.previous_accuracy; }
        break;
      }
      case 'chain_accepted': {
        const c = cp(v, e); c.status = 'accepted'; c.provider = c.provider || name(v, e.provider);
        const who = name(v, e.provider); const amt = big(e.amount);
        add(v.money.paid, who, amt); creditFees(v, e);
        if (c.cheat) v.cheatPaid += 1;
        note(v, t, `checkpoint at step ${e.step} accepted by ${voters(v, e).map((a) => name(v, a)).join(', ') || 'the committee'}: ${who} paid ${usdc(amt)} USDC${c.acc !== null ? `, accuracy ${(c.acc * 100).toFixed(1)} %` : ''}`, 'good', e.block);
        break;
      }
      case 'chain_rejected': {
        const c = cp(v, e); c.status = 'refused';
        const who = name(v, e.provider); const sl = big(e.slashed);
        if (sl > 0n) add(v.money.slashed, who, sl);
        creditFees(v, e); v.refused += 1; if (c.cheat) v.cheatRefused += 1;
        const q = c.acc !== null ? `: held-out accuracy ${(c.acc * 100).toFixed(1)} %${c.prev != null ? ` against ${(c.prev * 100).toFixed(1)} % of the last accepted` : ''}` : '';
        note(v, t, `${who}'s checkpoint at step ${e.step} refused${q}${sl > 0n ? `; stake slashed ${usdc(sl)} USDC` : ''}`, 'bad', e.block);
        break;
      }
      case 'chain_epoch_ended':
        if (e.reason !== 'completed') note(v, t, `epoch ${e.epoch} ended: ${e.reason.replace(/_/g, ' ')}`, '', e.block);
        break;
      case 'chain_completed':
        v.money.completedRefund = big(e.refund);
        note(v, t, `final model accepted: job ${e.job_id} complete`, 'good', e.block);
        break;
      case 'chain_settled': case 'chain_expired':
        v.money.refund += big(e.refund);
        note(v, t, `${e.event === 'chain_settled' ? 'settled' : 'expired'}: ${usdc(big(e.refund))} USDC back to the client; payout done`, 'good', e.block);
        break;
      case 'tx_mined': {
        const list = v.txByBlock.get(e.block) || []; list.push({ call: e.call, hash: e.tx_hash, gas: e.gas_used, by: l.node });
        v.txByBlock.set(e.block, list);
        break;
      }
      case 'scenario_fault': case 'break': {
        const who = e.target_node; const what = describe(e.action);
        if (['kill', 'pause', 'freeze', 'stop', 'hang'].includes(e.action)) v.harm.push({ t, node: who, what });
        if (e.action.startsWith('cheat')) v.cheats.add(`${who}/*`);
        note(v, t, `${who} ${what}${e.at_step != null ? ` at step ${e.at_step}` : ''}`, 'bad');
        break;
      }
      case 'node_status':
        Object.assign(node(v, e.target_node), { stake: e.stake, rep: e.reputation ?? null, down: e.state });
        break;
      default:
    }
  }
  function trim(v) {
    const cut = (arr, max) => { if (arr.length > max) arr.splice(0, arr.length - max); };
    for (const m of v.loss.values()) for (const pts of m.values()) cut(pts, KEEP.points);
    if (v.loss.size > 20) for (const k of [...v.loss.keys()].slice(0, v.loss.size - 20)) v.loss.delete(k);
    cut(v.timeline, KEEP.timeline);
    for (const [m, max] of [[v.cps, KEEP.checkpoints], [v.seenChain, KEEP.chain], [v.txByBlock, KEEP.chain]]) {
      if (m.size > max) for (const k of [...m.keys()].slice(0, m.size - max)) m.delete(k);
    }
  }
  function trainingAgain(v, who, t) {
    for (const h of v.harm) {
      if (h.again === undefined && h.node !== who && t >= h.t) {
        h.again = t - h.t;
        if (!v.again) v.again = { us: h.again, on: who, after: h.node };
      }
    }
  }
  function creditFees(v, e) {
    const fees = big(e.fees); v.money.fees += fees;
    const who = voters(v, e);
    if (who.length) { const each = fees / BigInt(who.length); who.forEach((a) => add(v.money.feesTo, name(v, a), each)); }
  }
  function describe(a) {
    return ({ kill: 'killed (kill -9)', pause: 'frozen (SIGSTOP)', freeze: 'frozen (SIGSTOP)', resume: 'thawed (SIGCONT)', thaw: 'thawed (SIGCONT)', stop: 'stopped (SIGTERM)', restart: 'restarted', cheat_junk: 'told to cheat: junk', cheat_stale: 'told to cheat: stale', cheat_nan: 'told to cheat: NaN', hang: 'hung (training stops, heartbeats go on)' })[a] || a;
  }

  // ---------- the stream -----------------------------------------------------------------
  function onLine(text) {
    let l; try { l = JSON.parse(text); } catch { return; }
    if (info.mode === 'replay') { lines.push(l); return; }
    apply(view, l); folded += 1; dirty = true;
    if (folded % 1000 === 0) trim(view);
  }
  function connect() {
    const es = new EventSource('feed');
    es.addEventListener('reset', () => { lines = []; view = fresh(); folded = 0; live = false; dirty = true; });
    es.addEventListener('line', (m) => onLine(m.data));
    es.addEventListener('live', () => {
      live = true; $('conn').textContent = info.mode === 'replay' ? `${lines.length} lines` : 'connected'; $('conn').classList.add('on');
      if (info.mode === 'replay') { es.close(); startReplay(); }
      dirty = true;
    });
    es.onerror = () => { if (info.mode !== 'replay' || !live) { $('conn').textContent = 'reconnecting…'; $('conn').classList.remove('on'); } };
  }

  // ---------- replay ---------------------------------------------------------------------
  function startReplay() {
    lines.sort((a, b) => a.timestamp_us - b.timestamp_us);
    const t0 = lines.length ? lines[0].timestamp_us : 0;
    const end = lines.length ? lines[lines.length - 1].timestamp_us : 0;
    const s = $('scrub'); s.max = String(Math.ceil((end - t0) / 1000)); s.value = '0';
    $('replay').hidden = false; seek(0);
  }
  function seek(ms) {
    const t0 = lines.length ? lines[0].timestamp_us : 0;
    const target = t0 + ms * 1000;
    if (shownUs !== null && target < shownUs) { view = fresh(); folded = 0; }
    while (folded < lines.length && lines[folded].timestamp_us <= target) apply(view, lines[folded++]);
    shownUs = target; view.now = target; $('scrub').value = String(ms); dirty = true;
  }
  let lastFrame = null;
  function tick(ts) {
    if (playing) {
      const dt = lastFrame === null ? 0 : ts - lastFrame;
      const s = $('scrub'); const next = Number(s.value) + dt * Number($('speed').value);
      if (next >= Number(s.max)) { seek(Number(s.max)); setPlaying(false); } else seek(Math.round(next));
    }
    lastFrame = ts;
    if (dirty) { dirty = false; render(); }
    requestAnimationFrame(tick);
  }
  function setPlaying(p) { playing = p; $('play').textContent = p ? '❚❚ pause' : '▶ play'; }

  // ---------- drawing --------------------------------------------------------------------
  const colours = new Map();
  const colour = (who) => { if (!colours.has(who)) colours.set(who, PALETTE[colours.size % PALETTE.length]); return colours.get(who); };
  let hoverStep = null;

  function nowUs(v) { return info.mode === 'replay' ? (shownUs ?? v.t) : Date.now() * 1000; }

  function render() {
    const v = view;
    $('clock').textContent = v.t0 === null ? '0.0 s' : `${secs(v, info.mode === 'replay' ? shownUs ?? v.t : v.t)} s`;
    $('now-step').textContent = String(v.lastStep);
    $('chart-job').textContent = v.job ? `job ${v.job}` : '';
    renderFigures(v); renderChart(v); renderCheckpoints(v); renderTimeline(v); renderMoney(v); renderNodes(v);
  }

  function renderFigures(v) {
    $('fig-notice').textContent = v.notice ? `${(v.notice.us / 1000).toFixed(0)} ms` : '–';
    $('fig-notice-how').textContent = v.notice ? `after ${v.notice.who} ${v.notice.what}` : 'no provider lost yet';
    $('fig-again').textContent = v.again ? `${(v.again.us / 1e6).toFixed(2)} s` : '–';
    $('fig-again-how').textContent = v.again ? `on ${v.again.on}, after ${v.again.after} went down` : '';
    const cheats = [...v.cps.values()].filter((c) => c.cheat && c.status !== 'pending').length;
    $('fig-junk').textContent = `${v.refused} refused`;
    $('fig-junk-how').textContent = cheats ? `${v.cheatRefused} of ${cheats} cheating checkpoints refused, ${v.cheatPaid} paid` : '';
  }

  function renderChart(v) {
    const loss = v.loss.get(v.job) || new Map();
    const cps = [...v.cps.values()].filter((c) => c.job === v.job);
    const c = $('chart'); const dpr = window.devicePixelRatio || 1;
    const W = c.clientWidth || 900; const H = Math.round(W * 340 / 900);
    if (c.width !== Math.round(W * dpr)) { c.width = Math.round(W * dpr); c.height = Math.round(H * dpr); }
    const g = c.getContext('2d'); g.setTransform(dpr, 0, 0, dpr, 0, 0); g.clearRect(0, 0, W, H);
    const lanes = Math.max(1, loss.size); const lane = lanes > 1 ? 6 : 10;
    const L = 44; const R = 10; const T = 22; const B = 30 + lanes * lane; const strip = lanes * lane;
    let maxStep = 10; let maxLoss = 0.1;
    for (const pts of loss.values()) for (const p of pts) { maxStep = Math.max(maxStep, p.step); if (Number.isFinite(p.loss)) maxLoss = Math.max(maxLoss, p.loss); }
    for (const cp of cps) maxStep = Math.max(maxStep, cp.step);
    maxStep = Math.ceil(maxStep / 50) * 50; maxLoss *= 1.08;
    const x = (s) => L + (s / maxStep) * (W - L - R);
    const y = (l) => T + (1 - l / maxLoss) * (H - T - B - 6);
    g.strokeStyle = '#2a303b'; g.fillStyle = '#8a93a3'; g.font = '11px system-ui'; g.lineWidth = 1;
    for (let i = 0; i <= 4; i++) { const l = (maxLoss * i) / 4; g.beginPath(); g.moveTo(L, y(l)); g.lineTo(W - R, y(l)); g.stroke(); g.fillText(l.toFixed(2), 4, y(l) + 4); }
    const tick = [10, 25, 50, 100, 250, 500, 1000, 2500, 5000].find((d) => maxStep / d <= 10) || Math.ceil(maxStep / 10);
    for (let s = 0; s <= maxStep; s += tick) g.fillText(String(s), x(s) - 8, H - 6);
    // Intervals: solid when accepted and paid, striped while not checked, red striped when refused.
    // One lane per provider: a refused interval and its replacement cover the same steps.
    const sy = H - B + 8; const laneOf = [...loss.keys()];
    for (const cp of cps) {
      const from = cp.parent ?? Math.max(0, cp.step - 50);
      const li = Math.max(0, laneOf.indexOf(cp.provider));
      g.fillStyle = cp.status === 'accepted' ? '#3fb68b' : stripes(g, cp.status === 'refused' ? '#e5534b' : '#8a93a3');
      g.fillRect(x(from), sy + li * lane, Math.max(1, x(cp.step) - x(from)), lane - 1);
      g.strokeStyle = cp.status === 'accepted' ? '#3fb68b' : cp.status === 'refused' ? '#e5534b' : '#8a93a3';
      g.setLineDash(cp.status === 'pending' ? [3, 3] : []); g.beginPath(); g.moveTo(x(cp.step), T); g.lineTo(x(cp.step), sy); g.stroke(); g.setLineDash([]);
      if (cp.acc !== null) { g.fillStyle = g.strokeStyle; g.fillText(`${(cp.acc * 100).toFixed(0)}%`, x(cp.step) - 10, cp.status === 'refused' ? T + 10 : T - 6); }
    }
    for (const [who, pts] of loss) {
      g.strokeStyle = colour(who); g.fillStyle = colour(who); g.lineWidth = 1.5; g.beginPath();
      let prev = null;
      for (const p of pts) {
        if (!Number.isFinite(p.loss)) { prev = null; continue; }
        if (prev === null || p.step !== prev + 1) g.moveTo(x(p.step), y(p.loss)); else g.lineTo(x(p.step), y(p.loss));
        prev = p.step;
      }
      g.stroke();
    }
    if (hoverStep !== null) { g.strokeStyle = '#e6e9ef55'; g.beginPath(); g.moveTo(x(hoverStep), T); g.lineTo(x(hoverStep), sy + strip); g.stroke(); }
    for (let i = 0; i < laneOf.length && lanes > 1; i++) { g.fillStyle = colour(laneOf[i]); g.fillRect(L - 8, sy + i * lane, 5, lane - 1); }
    chartGeom = { L, R, W, maxStep };
    // The legend says how many points each provider's curve holds.
    const legend = $('legend');
    const want = [...loss.keys()];
    if (legend.childElementCount !== want.length) legend.replaceChildren(...want.map(() => document.createElement('span')));
    want.forEach((who, i) => {
      const el = legend.children[i]; el.className = 'legend'; el.dataset.provider = who; el.dataset.points = String(loss.get(who).length);
      const label = `${who} (${loss.get(who).length} steps)`;
      if (el.dataset.label !== label) {
        const sw = document.createElement('i'); sw.style.background = colour(who);
        el.replaceChildren(sw, label); el.dataset.label = label;
      }
    });
    if (hoverStep !== null) readout(v, hoverStep);
  }
  const patterns = new Map();
  function stripes(g, col) {
    if (patterns.has(col)) return patterns.get(col);
    const p = document.createElement('canvas'); p.width = 6; p.height = 6; const q = p.getContext('2d');
    q.strokeStyle = col; q.lineWidth = 2; q.beginPath(); q.moveTo(0, 6); q.lineTo(6, 0); q.stroke();
    const pat = g.createPattern(p, 'repeat'); patterns.set(col, pat); return pat;
  }
  let chartGeom = null;
  function readout(v, step) {
    const loss = v.loss.get(v.job) || new Map();
    const parts = [];
    for (const [who, pts] of loss) {
      const p = pts.find((q) => q.step === step);
      if (p) parts.push(`${who}: loss ${Number.isFinite(p.loss) ? p.loss.toFixed(4) : p.loss} (epoch ${p.epoch})`);
    }
    const cp = [...v.cps.values()].filter((c) => c.job === v.job).find((c) => (c.parent ?? c.step - 50) < step && step <= c.step);
    const state = cp ? { accepted: 'accepted and paid', refused: 'refused', pending: 'not checked yet' }[cp.status] : 'no checkpoint yet';
    $('readout').textContent = `step ${step}: ${parts.join('; ') || 'no point'} — interval ${state}`;
  }
  function hover(ev) {
    if (!chartGeom) return;
    const r = $('chart').getBoundingClientRect(); const px = ev.clientX - r.left;
    const { L, R, W, maxStep } = chartGeom;
    hoverStep = Math.max(0, Math.min(maxStep, Math.round(((px - L) / (W - L - R)) * maxStep)));
    dirty = true;
  }

  function renderCheckpoints(v) {
    const decided = [...v.cps.values()].filter((c) => c.job === v.job && (c.status !== 'pending' || c.acc !== null)).slice(-12);
    const tb = $('checkpoints').tBodies[0];
    while (tb.rows.length > decided.length) tb.deleteRow(-1);
    decided.forEach((c, i) => {
      const r = tb.rows[i] || tb.insertRow();
      while (r.cells.length < 5) r.insertCell();
      const cells = [c.step, c.provider || '', c.status === 'accepted' ? 'accepted' : c.status === 'refused' ? 'refused' : 'being checked', c.acc !== null ? `${(c.acc * 100).toFixed(1)} %` : '–', c.prev != null ? `${(c.prev * 100).toFixed(1)} %` : '–'];
      cells.forEach((x, j) => { if (r.cells[j].textContent !== String(x)) r.cells[j].textContent = String(x); });
      r.className = c.status;
    });
  }

  function renderTimeline(v) {
    const ol = $('timeline'); const items = v.timeline.slice(-TIMELINE_SHOWN);
    const stick = ol.scrollTop + ol.clientHeight >= ol.scrollHeight - 8;
    while (ol.childElementCount > items.length) ol.lastElementChild.remove();
    items.forEach((it, i) => {
      let li = ol.children[i];
      if (!li) { li = document.createElement('li'); ol.appendChild(li); }
      const tx = it.block !== undefined ? txOf(v, it.block) : null;
      const html = `<span class="t">${secs(v, it.t)} s</span> ${esc(it.text)}${tx ? ` <a href="#tx=${tx.hash}" data-tx="${tx.hash}">tx ${short(tx.hash)}</a>` : it.block !== undefined ? ` <span class="t">block ${it.block}</span>` : ''}`;
      if (li.dataset.html !== html) { li.innerHTML = html; li.dataset.html = html; }
      li.className = it.cls; li.dataset.t = String(it.t);
    });
    if (stick) ol.scrollTop = ol.scrollHeight;
  }
  function txOf(v, block) { const l = v.txByBlock.get(block); return l && l[0]; }
  function showTx(hash) {
    for (const l of view.txByBlock.values()) for (const t of l) if (t.hash === hash) {
      const box = $('tx'); box.hidden = false;
      box.textContent = `transaction ${t.hash}\ncall ${t.call}, sent by ${t.by}, gas used ${t.gas}`;
      return;
    }
  }

  function renderMoney(v) {
    const m = v.money; const rows = [];
    const paid = [...m.paid.values()].reduce((a, b) => a + b, 0n);
    for (const [who, amt] of m.paid) rows.push([`paid to ${who}`, amt, `paid:${who}`]);
    for (const [who, amt] of m.slashed) rows.push([`stake slashed from ${who} (burned, not from the budget)`, amt, `slashed:${who}`]);
    rows.push(['verifier fees', m.fees, 'fees']);
    for (const [who, amt] of m.feesTo) rows.push([`  to ${who}`, amt, `fees:${who}`]);
    rows.push(['refund to the client', m.refund, 'refund']);
    const held = m.budget - paid - m.fees - m.refund;
    rows.push(['still held by the escrow', held, 'held']);
    rows.push(['budget', m.budget, 'budget']);
    const tb = $('money').tBodies[0];
    while (tb.rows.length > rows.length) tb.deleteRow(-1);
    rows.forEach(([label, amt, key], i) => {
      const r = tb.rows[i] || tb.insertRow();
      if (r.cells.length === 0) { r.insertCell(); r.insertCell().className = 'num'; }
      r.dataset.key = key; r.dataset.base = amt.toString();
      r.cells[0].textContent = label; r.cells[1].textContent = `${usdc(amt)} USDC`;
    });
    const id = $('identity');
    if (m.budget === 0n) { id.textContent = ''; return; }
    const settled = held === 0n;
    id.className = `identity ${settled ? 'ok' : ''}`;
    id.dataset.holds = String(settled);
    id.textContent = `paid ${usdc(paid)} + fees ${usdc(m.fees)} + refund ${usdc(m.refund)} = ${usdc(paid + m.fees + m.refund)} of the ${usdc(m.budget)} USDC budget${settled ? ': every unit accounted for' : ` (${usdc(held)} still held)`}`;
  }

  function renderNodes(v) {
    const tb = $('nodes').tBodies[0]; const now = nowUs(v);
    const list = [...v.nodes.values()].filter((n) => n.name !== 'harness' && (n.roles.length || n.beat));
    while (tb.rows.length > list.length) tb.deleteRow(-1);
    list.forEach((n, i) => {
      const r = tb.rows[i] || tb.insertRow();
      while (r.cells.length < 9) r.insertCell();
      r.dataset.node = n.name;
      const age = n.beat ? `${Math.max(0, (now - n.beat) / 1000).toFixed(0)} ms` : '–';
      const cells = [n.name + (n.down ? ` (${n.down})` : ''), n.roles.join(', '), short(n.addr), short(n.peer), age, n.step ?? '–', n.stake ? `${usdc(big(n.stake))}` : '–', n.rep ?? '–', n.error];
      cells.forEach((c, j) => { if (r.cells[j].textContent !== String(c)) r.cells[j].textContent = String(c); });
      r.cells[2].className = 'mono'; r.cells[3].className = 'mono';
    });
  }

  // ---------- break it -------------------------------------------------------------------
  function renderTargets() {
    const box = $('break'); box.replaceChildren();
    $('break-box').hidden = !info.targets.length;
    for (const t of info.targets) {
      const row = document.createElement('div'); row.className = 'row';
      row.innerHTML = `<b>${esc(t.node)}</b><span class="sub">${esc(t.roles.join(', '))}</span>`;
      for (const a of t.actions) {
        const b = document.createElement('button'); b.type = 'button'; b.textContent = a.replace(/_/g, ' ');
        b.dataset.node = t.node; b.dataset.action = a; b.addEventListener('click', () => act(t.node, a));
        row.appendChild(b);
      }
      box.appendChild(row);
    }
  }
  async function act(nodeName, action) {
    const out = $('break-result');
    if (!TOKEN) { out.textContent = 'no token: open the dashboard URL the harness printed (it ends in #token=…)'; }
    try {
      const r = await fetch('break', { method: 'POST', headers: { 'content-type': 'application/json', authorization: `Bearer ${TOKEN}` }, body: JSON.stringify({ node: nodeName, action }) });
      const body = await r.json();
      out.textContent = r.ok ? body.done : `refused (${r.status}): ${body.error}`;
      out.dataset.status = String(r.status);
      const i = await fetch('info'); if (i.ok) { info = await i.json(); renderTargets(); }
    } catch (e) { out.textContent = `failed: ${e}`; }
  }

  function esc(s) { return String(s).replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]); }

  // ---------- start ----------------------------------------------------------------------
  async function start() {
    // A broken page says so where the connection state is, instead of silently freezing.
    window.addEventListener('error', (e) => { $('conn').textContent = `page error: ${e.message}`; $('conn').classList.remove('on'); });
    try { const r = await fetch('info'); if (r.ok) info = await r.json(); } catch { /* shown as a connection state */ }
    $('title').textContent = info.title || '';
    $('mode').textContent = info.mode === 'replay' ? 'replay' : 'live';
    renderTargets();
    const c = $('chart');
    c.addEventListener('pointermove', hover);
    c.addEventListener('pointerdown', (ev) => { c.setPointerCapture(ev.pointerId); hover(ev); });
    c.addEventListener('pointerleave', () => { hoverStep = null; $('readout').textContent = 'hover or drag over the chart to read a step'; dirty = true; });
    $('scrub').addEventListener('input', () => { setPlaying(false); seek(Number($('scrub').value)); });
    $('play').addEventListener('click', () => { if (!playing && Number($('scrub').value) >= Number($('scrub').max)) seek(0); setPlaying(!playing); });
    $('timeline').addEventListener('click', (ev) => { const a = ev.target.closest('a[data-tx]'); if (a) { ev.preventDefault(); showTx(a.dataset.tx); } });
    // Heartbeat ages move with the clock even when nothing arrives.
    if (info.mode !== 'replay') setInterval(() => { dirty = true; }, 1000);
    connect();
    requestAnimationFrame(tick);
    window.gpuchainDashboard = { view: () => view, seek, lines: () => (info.mode === 'replay' ? lines.length : folded), ready: () => live };
  }
  start();
})();
