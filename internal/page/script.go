package page

// pageScript is the page's one script, served at /page.js (the pages allow scripts from the
// agent only). It keeps the live part current from the server-sent event stream, shows a
// banner while the stream is down or the agent cannot read the records in Nomad, shows
// times relative with the absolute time on hover, keeps the user's Nomad token in
// sessionStorage and sends it in the X-Nomad-Token header of each action (never in a cookie
// or a URL), and files a new restart once its plan was shown.
const pageScript = `(function () {
  'use strict';
  var TOKEN_KEY = 'nomadRestartToken';
  var body = document.body;
  var live = document.getElementById('live');
  var stale = document.getElementById('stale');
  var lastUpdate = null;

  function ago(when) {
    var s = Math.round((Date.now() - when.getTime()) / 1000);
    var future = s < 0;
    s = Math.abs(s);
    var text;
    if (s < 60) text = s + 's';
    else if (s < 3600) text = Math.floor(s / 60) + 'm' + (s % 60 ? ' ' + (s % 60) + 's' : '');
    else if (s < 86400) text = Math.floor(s / 3600) + 'h' + (Math.floor(s / 60) % 60 ? ' ' + (Math.floor(s / 60) % 60) + 'm' : '');
    else text = Math.floor(s / 86400) + 'd';
    return future ? 'in ' + text : text + ' ago';
  }
  function relTimes(root) {
    root.querySelectorAll('time[datetime]').forEach(function (t) {
      var d = new Date(t.getAttribute('datetime'));
      if (!isNaN(d)) t.textContent = ago(d);
    });
  }

  // Live updates. The banner says the page may be out of date while the stream is down,
  // or while the agent says (a "stale" event) that it cannot list the records in Nomad.
  var stream = body.getAttribute('data-stream');
  var retry = 1000;
  var nomadStale = null;
  function showNomadStale() {
    if (body.getAttribute('data-live') === 'down') return; // the stream's own banner stays
    body.setAttribute('data-nomad', nomadStale ? 'unreachable' : 'ok');
    if (!nomadStale) {
      stale.hidden = true;
      return;
    }
    stale.textContent = 'The agent cannot read the restarts\' records since ' + new Date(nomadStale.since).toLocaleTimeString() +
      ' (' + nomadStale.error + '); it keeps trying. This page may be out of date.';
    stale.hidden = false;
  }
  function connect() {
    var es = new EventSource(stream);
    es.addEventListener('open', function () {
      retry = 1000;
      body.setAttribute('data-live', 'open');
      nomadStale = null; // a new stream says so again if it still is
      showNomadStale();
    });
    es.addEventListener('stale', function (e) {
      var s = JSON.parse(e.data);
      nomadStale = s.since ? s : null;
      showNomadStale();
    });
    es.addEventListener('update', function (e) {
      var u = JSON.parse(e.data);
      live.innerHTML = u.html;
      relTimes(live);
      lastUpdate = new Date();
      body.setAttribute('data-updates', String(Number(body.getAttribute('data-updates') || 0) + 1));
      if (u.status !== undefined) showControls(u.status, u.question);
    });
    es.addEventListener('error', function () {
      body.setAttribute('data-live', 'down');
      var since = lastUpdate ? ' It shows the state of ' + lastUpdate.toLocaleTimeString() + '.' : '';
      stale.textContent = 'Live updates are disconnected from the agent; reconnecting. This page may be out of date.' + since;
      stale.hidden = false;
      if (es.readyState === EventSource.CLOSED) {
        // The browser gave up (an answer that was not a stream): try again, more slowly each time.
        setTimeout(connect, retry);
        retry = Math.min(retry * 2, 30000);
      }
    });
  }
  if (stream) connect();
  relTimes(document);
  setInterval(function () { relTimes(document); }, 10000);

  // The user's token: in this tab's sessionStorage only.
  var tokenForm = document.getElementById('token-form');
  var tokenInput = document.getElementById('token');
  var tokenState = document.getElementById('token-state');
  function showToken() {
    var set = !!sessionStorage.getItem(TOKEN_KEY);
    tokenState.textContent = set
      ? 'A token is set for this tab: actions run with it.'
      : 'No token set: actions run as Nomad\'s anonymous token (enough when ACLs are disabled).';
    body.setAttribute('data-token', set ? 'set' : 'unset');
  }
  tokenForm.addEventListener('submit', function (e) {
    e.preventDefault();
    var v = tokenInput.value.trim();
    if (v) sessionStorage.setItem(TOKEN_KEY, v); else sessionStorage.removeItem(TOKEN_KEY);
    tokenInput.value = '';
    showToken();
  });
  document.getElementById('token-clear').addEventListener('click', function () {
    sessionStorage.removeItem(TOKEN_KEY);
    tokenInput.value = '';
    showToken();
  });
  showToken();

  // Requests that change something: POST, with the token in a header, never a cookie.
  function post(path, payload) {
    var headers = { 'Content-Type': 'application/json' };
    var token = sessionStorage.getItem(TOKEN_KEY);
    if (token) headers['X-Nomad-Token'] = token;
    return fetch(path, {
      method: 'POST', headers: headers, body: JSON.stringify(payload || {}),
      credentials: 'omit', cache: 'no-store'
    }).then(function (r) {
      return r.json().catch(function () { return { error: r.status + ' ' + r.statusText }; })
        .then(function (j) { return { ok: r.ok, body: j }; });
    }, function (err) {
      return { ok: false, body: { error: 'The agent could not be reached: ' + err.message } };
    });
  }
  function say(el, ok, text) {
    el.className = ok ? 'ok' : 'err';
    el.setAttribute('data-outcome', ok ? 'ok' : 'error');
    el.textContent = text;
  }

  // Actions on a restart or a fleet (its page).
  var actions = document.getElementById('actions');
  var answerForm = document.getElementById('answer-form');
  function showControls(status, question) {
    if (!actions) return;
    var ended = ['succeeded', 'failed', 'canceled'].indexOf(status) >= 0;
    actions.querySelectorAll('button[data-action]').forEach(function (b) { b.disabled = ended; });
    answerForm.hidden = status !== 'waiting';
    document.getElementById('question-text').textContent = question || '';
  }
  if (actions) {
    var msg = document.getElementById('action-msg');
    var act = function (action, payload) {
      msg.removeAttribute('data-outcome');
      msg.className = '';
      msg.textContent = 'Sending ' + action + '…';
      post(actions.getAttribute('data-base') + '/' + action, payload).then(function (res) {
        say(msg, res.ok, res.ok ? res.body.message : res.body.error);
      });
    };
    actions.querySelectorAll('button[data-action]').forEach(function (b) {
      b.addEventListener('click', function () { act(b.getAttribute('data-action')); });
    });
    answerForm.addEventListener('submit', function (e) {
      e.preventDefault();
      act('answer', { Answer: document.getElementById('answer').value });
    });
    showControls(body.getAttribute('data-status'), body.getAttribute('data-question'));
  }

  // A new restart (the list): plan first (a dry run), then file exactly that plan.
  var fileForm = document.getElementById('file-form');
  if (fileForm) {
    var plan = document.getElementById('plan');
    var submit = document.getElementById('file-submit');
    var fileMsg = document.getElementById('file-msg');
    var reviewed = null;
    // A field left empty is not sent, so that its option takes its default; the API
    // refuses an option given empty, as run refuses an empty flag.
    var formValues = function () {
      var values = {};
      ['Namespace', 'Job', 'BatchSize', 'Health', 'Gates', 'DrainUntil', 'BalancerRefresh'].forEach(function (name) {
        var v = fileForm[name].value;
        if (v.trim() !== '') values[name] = v;
      });
      return values;
    };
    var forget = function () { reviewed = null; submit.hidden = true; plan.innerHTML = ''; };
    fileForm.addEventListener('input', forget);
    fileForm.addEventListener('submit', function (e) {
      e.preventDefault();
      forget();
      fileMsg.removeAttribute('data-outcome');
      fileMsg.textContent = 'Planning…';
      var values = formValues();
      post('/restarts/plan', values).then(function (res) {
        if (!res.ok) { say(fileMsg, false, res.body.error); return; }
        plan.innerHTML = res.body.html;
        reviewed = { values: values, allocs: res.body.allocs };
        submit.hidden = false;
        say(fileMsg, true, 'Review the plan, then file it.');
        submit.focus();
      });
    });
    submit.addEventListener('click', function () {
      if (!reviewed) return;
      var payload = reviewed.values;
      payload.Expect = reviewed.allocs;
      fileMsg.removeAttribute('data-outcome');
      fileMsg.textContent = 'Filing…';
      post('/restarts', payload).then(function (res) {
        if (!res.ok) { say(fileMsg, false, res.body.error); return; }
        say(fileMsg, true, res.body.message);
        location.assign('/restart/' + encodeURIComponent(res.body.id));
      });
    });
  }
})();
`
