// The course presenter's pager (course_utils/present.py): one slide of the Voilà page at a time.
//
// Every cell stays where Voilà put it; the cells of other slides are collapsed to no height (not display: none), so
// a plot drawn on a hidden slide still takes the slide's full width and needs no redraw when its slide comes up.
// Slides follow the notebooks' metadata (course_utils/slides.py): "slide" and "subslide" start one, "skip" and
// "notes" never show, anything else continues the slide before it.
(function () {
  "use strict";

  // What keeps a key when it has focus: a slider's handle moves with the arrows, boxes and drop-downs use them too.
  const TAKES_KEYS = "input, textarea, select, [contenteditable], [role=slider], [role=listbox], .noUi-handle";
  const pager = document.querySelector(".course-pager");
  const counter = pager.querySelector(".course-pager-count");
  const previousButton = pager.querySelector(".course-pager-prev");
  const nextButton = pager.querySelector(".course-pager-next");
  const cells = Array.from(document.querySelectorAll(".course-cell"));
  const slideOf = new Map();
  let slideCount = 0;
  let current = 0;

  function shows(cell) {
    const inner = cell.querySelector(".jp-Cell");
    return Boolean(inner) && !(inner.classList.contains("jp-mod-noOutputs")
                               && inner.classList.contains("jp-mod-noInput"));
  }

  // Number the slides; a slide with nothing to show (code cells without output) gets no number.
  function numberSlides() {
    let slide = [];
    const slides = [slide];
    for (const cell of cells) {
      const type = cell.dataset.slideType;
      if (type === "skip" || type === "notes") {
        cell.classList.add("course-skipped");
      } else {
        if ((type === "slide" || type === "subslide") && slide.length) {
          slide = [];
          slides.push(slide);
        }
        slide.push(cell);
      }
    }
    for (const members of slides.filter(members => members.some(shows))) {
      members.forEach(cell => slideOf.set(cell, slideCount));
      slideCount += 1;
    }
  }

  function show(index) {
    current = Math.max(0, Math.min(index, slideCount - 1));
    for (const cell of cells) {
      cell.classList.toggle("course-off", slideOf.get(cell) !== current);
    }
    const owner = document.activeElement;
    if (owner && owner.closest(".course-off")) {
      owner.blur();  // a widget that left the screen must not keep the keys
    }
    counter.textContent = `slide ${current + 1} / ${slideCount}`;
    previousButton.disabled = current === 0;
    nextButton.disabled = current === slideCount - 1;
    history.replaceState(null, "", `#${current + 1}`);
    window.scrollTo(0, 0);
  }

  // PageDown and Space, a clicker's "next", first show the rest of a slide taller than the screen.
  function scrolled(direction) {
    const page = document.scrollingElement;
    const room = direction > 0 ? page.scrollHeight - page.clientHeight - page.scrollTop : page.scrollTop;
    if (room <= 1) {
      return false;
    }
    window.scrollBy(0, direction * Math.min(room, page.clientHeight * 0.85));
    return true;
  }

  function step(event) {
    const forward = event.key === "PageDown" || event.key === "ArrowRight" || (event.key === " " && !event.shiftKey);
    const back = event.key === "PageUp" || event.key === "ArrowLeft" || (event.key === " " && event.shiftKey);
    if (!forward && !back) {
      return event.key === "Home" ? 0 : event.key === "End" ? slideCount - 1 : null;
    }
    const direction = forward ? 1 : -1;
    const scrolls = event.key === "PageDown" || event.key === "PageUp" || event.key === " ";
    return scrolls && scrolled(direction) ? current : current + direction;
  }

  // Keys typed while a widget has focus are the widget's; Escape hands the keys back to the slides. The pager
  // listens first (window, capture phase): a course widget stops every key at its root (figures.PageHelper, so
  // that JupyterLab's shortcuts stay off), and a clicker's PageDown after a click on a button must still turn the
  // slide.
  function keptByFocus(event) {
    const owner = document.activeElement;
    if (!owner || owner === document.body || pager.contains(owner)) {
      return false;
    }
    if (event.key === "Escape") {
      owner.blur();
      return true;
    }
    return owner.matches(TAKES_KEYS) || event.key === " " || event.key === "Enter";
  }

  function onKey(event) {
    if (event.altKey || event.ctrlKey || event.metaKey || keptByFocus(event)) {
      return;
    }
    const target = step(event);
    if (target !== null) {
      event.preventDefault();
      if (target !== current) {
        show(target);
      }
    }
  }

  numberSlides();
  if (!slideCount) {
    return;  // a notebook with nothing to show keeps the pager hidden
  }
  for (const [button, direction] of [[previousButton, -1], [nextButton, 1]]) {
    button.addEventListener("mousedown", event => event.preventDefault());  // a click leaves the focus where it was
    button.addEventListener("click", () => show(current + direction));
  }
  window.addEventListener("keydown", onKey, true);
  // A button clicked with the mouse (Train, Check) gives the keys back once its own click has run: a clicker sends
  // Space and Enter too, which would otherwise press that button again instead of turning the slide. A button
  // pressed from the keyboard (detail 0) keeps the focus, as keyboard users expect.
  document.addEventListener("click", event => {
    const button = event.target instanceof Element ? event.target.closest("button") : null;
    if (button && event.detail > 0 && !pager.contains(button)) {
      setTimeout(() => { if (document.activeElement === button) button.blur(); }, 0);
    }
  });
  const asked = /^#(\d+)$/.exec(location.hash);
  show(asked ? Number(asked[1]) - 1 : 0);
  pager.hidden = false;
})();
