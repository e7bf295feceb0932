// The course site (trainperf site), loaded with `defer` on every page.
(() => {
  // A search result's snippet comes from the chapter's text. Sphinx reads it from the page's
  // [role="main"] block, which in this theme also holds the theme switcher and the "on this
  // page" list: a snippet would start with "System Settings Light Dark" or the list's headings.
  if (typeof Search !== "undefined" && Search.htmlToText) {
    const fromWholeMain = Search.htmlToText;
    Search.htmlToText = (htmlString, anchor) => {
      const doc = new DOMParser().parseFromString(htmlString, "text/html");
      const main = doc.querySelector('[role="main"]');
      const article = main && main.querySelector("article");
      if (article) main.replaceChildren(article);
      return fromWholeMain(doc.documentElement.outerHTML, anchor);
    };
  }

  // The theme's words that its templates write in English whatever the page's language (the
  // sidebar buttons' tooltips, the navigation landmarks' names), in this page's language.
  // trainperf site writes the words in (src/trainperf/site.py, TEXT[lang]["theme"]).
  const labels = {/*LABELS*/};
  for (const attribute of ["title", "aria-label", "data-bs-original-title"]) {
    for (const element of document.querySelectorAll(`[${attribute}]`)) {
      const translated = labels[element.getAttribute(attribute)];
      if (translated) element.setAttribute(attribute, translated);
    }
  }
})();
