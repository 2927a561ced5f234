/* derive's page script. Typesets every formula of the page with KaTeX (each element of class
   "math" holds its LaTeX source; those folded in a closed <details> when it is first opened, or
   printed), marks what is wider than the screen ("scrolls": the stylesheet shows that it
   scrolls), then makes the explicit matrices answer the reader: hovering or focusing an entry
   shows its formula and its value in the space kept under its section's matrices (it covers
   nothing there), and lights up the entries that formula reads (their ids are in the entry's
   data-reads). */
(function () {
  "use strict";

  /* KaTeX's markup as a string set in one go is faster than its DOM calls; a formula that
     comes back (n, $X$, an entry) is typeset once. */
  var typeset_ = {};
  function typeset(element, tex, display) {
    var key = (display ? "D" : "I") + tex;
    if (!(key in typeset_)) {
      typeset_[key] = katex.renderToString(tex, { displayMode: display, throwOnError: false });
    }
    element.innerHTML = typeset_[key];
  }

  function typesetAll(root) {
    var maths = root.querySelectorAll(".math:not(.typeset)");
    for (var k = 0; k < maths.length; k++) {
      var folded = maths[k].closest("details:not([open])");
      if (folded === null || folded === root) {
        typeset(maths[k], maths[k].textContent, maths[k].classList.contains("display"));
        maths[k].classList.add("typeset");
      }
    }
  }

  typesetAll(document);

  /* A display or a figure wider than its box scrolls, and is marked so. Checked whenever its
     size changes: a display far down the page is laid out only when it comes near (the
     stylesheet's content-visibility), and a window can be resized. */
  function markScrolling(element) {
    element.classList.toggle("scrolls", element.scrollWidth > element.clientWidth + 1);
  }
  var wide = document.querySelectorAll(".math.display, figure.plot .plot-area");
  if (window.ResizeObserver) {
    var watcher = new ResizeObserver(function (changes) {
      changes.forEach(function (change) { markScrolling(change.target); });
    });
    Array.prototype.forEach.call(wide, function (element) { watcher.observe(element); });
  } else {
    Array.prototype.forEach.call(wide, markScrolling);
  }
  document.addEventListener("toggle", function (event) {
    if (event.target.open) {
      typesetAll(event.target);
    }
  }, true);

  /* On paper: the sums written out, not folded away. */
  var folded = [];
  window.addEventListener("beforeprint", function () {
    folded = Array.prototype.filter.call(document.querySelectorAll("details"), function (d) {
      return !d.open;
    });
    folded.forEach(function (d) {
      d.open = true;
      typesetAll(d);
    });
  });
  window.addEventListener("afterprint", function () {
    folded.forEach(function (d) { d.open = false; });
  });

  var panel = document.getElementById("entry-panel");
  if (!panel) {
    return;
  }
  var formula = panel.querySelector(".entry-formula");
  var value = panel.querySelector(".entry-value");
  var lit = [];

  function clear() {
    for (var k = 0; k < lit.length; k++) {
      lit[k].classList.remove("reads", "current");
    }
    lit = [];
    panel.hidden = true;
    if (panel.parentElement.classList) {
      panel.parentElement.classList.remove("showing");
    }
  }

  function show(cell) {
    clear();
    var tex = cell.dataset.entry;
    if (cell.dataset.formula !== undefined) {
      tex += " = " + cell.dataset.formula;
    }
    typeset(formula, tex, true);
    if (cell.dataset.value !== undefined) {  /* the minus sign the cells print, not a hyphen */
      value.textContent = "value: " + cell.dataset.value.replace(/-/g, "\u2212");
    } else {
      value.textContent = cell.dataset.formula === undefined ? "an input" : "";
    }
    cell.classList.add("current");
    lit.push(cell);
    var reads = (cell.dataset.reads || "").split(" ");
    for (var k = 0; k < reads.length; k++) {
      var read = reads[k] && document.getElementById(reads[k]);
      if (read) {
        read.classList.add("reads");
        lit.push(read);
      }
    }
    panel.hidden = false;
    place(cell);
  }

  /* Into the space kept under the section's matrices. */
  function place(cell) {
    var slot = cell.closest(".matrices").querySelector(".entry-slot");
    if (panel.parentElement !== slot) {
      slot.appendChild(panel);
    }
    slot.classList.add("showing");
  }

  function entryOf(target) {
    return target && target.closest ? target.closest("td.entry") : null;
  }

  document.addEventListener("mouseover", function (event) {
    var cell = entryOf(event.target);
    if (cell && !cell.classList.contains("current")) {
      show(cell);
    }
  });
  document.addEventListener("mouseout", function (event) {
    var cell = entryOf(event.target);
    if (cell && entryOf(event.relatedTarget) !== cell) {
      var focused = entryOf(document.activeElement);
      if (focused) {
        show(focused);
      } else {
        clear();
      }
    }
  });
  document.addEventListener("focusin", function (event) {
    var cell = entryOf(event.target);
    if (cell) {
      show(cell);
    }
  });
  document.addEventListener("focusout", function (event) {
    if (entryOf(event.target) && !entryOf(event.relatedTarget)) {
      clear();
    }
  });

  /* Arrow keys move between the entries of one matrix; one entry per matrix is in the tab order
     (tabindex 0), the one last focused. Escape leaves the matrix. */
  var moves = { ArrowLeft: [0, -1], ArrowRight: [0, 1], ArrowUp: [-1, 0], ArrowDown: [1, 0] };
  document.addEventListener("keydown", function (event) {
    var cell = entryOf(event.target);
    if (!cell) {
      return;
    }
    if (event.key === "Escape") {
      cell.blur();
      return;
    }
    var move = moves[event.key];
    if (!move) {
      return;
    }
    var row = cell.parentElement;
    var rows = row.parentElement.rows;
    var r = Math.min(Math.max(row.sectionRowIndex + move[0], 0), rows.length - 1);
    var c = Math.min(Math.max(cell.cellIndex + move[1], 0), rows[r].cells.length - 1);
    var next = rows[r].cells[c];
    event.preventDefault();
    if (next !== cell) {
      cell.tabIndex = -1;
      next.tabIndex = 0;
      next.focus();
    }
  });
})();
