// The site's math: each span or div that pymdownx.arithmatex marks (\( … \) inline, \[ … \] for
// a display) typeset by the vendored KaTeX. A formula KaTeX cannot read is shown in red with
// the class katex-error, which the site's tests look for.
document.addEventListener("DOMContentLoaded", () => {
  for (const element of document.querySelectorAll(".arithmatex")) {
    const source = element.textContent.trim();
    const display = source.startsWith("\\[");
    katex.render(source.slice(2, -2), element, {
      displayMode: display,
      throwOnError: false,
    });
  }
});
