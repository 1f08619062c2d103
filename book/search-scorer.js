/* gradlab's search scorer (Sphinx's html_search_scorer; inlined into language_data.js).
 *
 * Sphinx's index says only which pages hold a word and whether some heading does: every
 * heading counts as the page's title (15), any other mention 5, and ties go alphabetically.
 * This scorer ranks a result by where the query's words stand in the page, from the
 * sections that tools/book/search_sections.py stores at build time
 * (window.GRADLAB_SEARCH_SECTIONS, loaded by search.html only):
 *   the page's title holds the word       +100
 *   each heading that holds it             +20 (at most 5 headings)
 *   each mention in the prose              +0.5 (at most 40)
 * and points the result at its best section (the heading, then the most mentions) with a
 * snippet of that section around the first mention. A Latin word matches a word of the
 * page with the same stem (Sphinx's stemmer: "clip" finds "clipping"); a Chinese term is
 * found as a substring (梯度爆炸 in 让梯度爆炸).
 */
var Scorer = {
  objNameMatch: 11, objPartialMatch: 6, objPrio: {0: 15, 1: 5, 2: -5}, objPrioDefault: 0,
  title: 15, partialTitle: 7, term: 5, partialTerm: 2,

  _terms: null,
  _pages: new Map(),
  _stems: new Map(),

  terms() {
    if (this._terms === null) {
      const q = new URLSearchParams(window.location.search).get("q") || "";
      const stemmer = new Stemmer();
      this._terms = splitQuery(q.toLowerCase().trim())
        .filter((t) => !stopwords.has(t) && !/^\d+$/.test(t))
        .map((t) => ({raw: t, stem: stemmer.stemWord(t), cjk: /[\u3400-\u9fff]/.test(t)}));
    }
    return this._terms;
  },

  stemsOf(text) {
    let s = this._stems.get(text);
    if (s === undefined) {
      const stemmer = new Stemmer();
      s = splitQuery(text.toLowerCase()).map((w) => [w, stemmer.stemWord(w)]);
      this._stems.set(text, s);
    }
    return s;
  },

  count(text, term) {
    if (!text) return 0;
    if (term.cjk) return text.toLowerCase().split(term.raw).length - 1;
    return this.stemsOf(text).filter(([w, s]) => w === term.raw || s === term.stem).length;
  },

  firstAt(text, term) {
    const lower = text.toLowerCase();
    if (term.cjk) return lower.indexOf(term.raw);
    const re = /[\p{Letter}\p{Number}_]+/gu;
    const stemmer = new Stemmer();
    for (let m; (m = re.exec(lower)) !== null;)
      if (m[0] === term.raw || stemmer.stemWord(m[0]) === term.stem) return m.index;
    return -1;
  },

  snippet(text, at) {
    if (!text) return "";
    const start = Math.max(0, at - 60);
    return (start > 0 ? "…" : "") + text.substr(start, 180).trim() + (start + 180 < text.length ? "…" : "");
  },

  // {score, best section}: computed once per page
  page(docname, docTitle) {
    if (this._pages.has(docname)) return this._pages.get(docname);
    const sections = (window.GRADLAB_SEARCH_SECTIONS || {})[docname] || [];
    let score = 0, best = null, bestScore = -1;
    for (const term of this.terms()) {
      if (this.count(docTitle, term)) score += 100;
      let headings = 0, mentions = 0;
      for (const [id, heading, prose] of sections) {
        const h = this.count(heading, term) > 0, n = this.count(prose, term);
        headings += h ? 1 : 0;
        mentions += n;
        const s = (h ? 1000 : 0) + n;
        if (s > bestScore && (h || n)) {
          const at = this.firstAt(prose, term);
          best = {id, heading, snippet: this.snippet(prose, Math.max(at, 0))};
          bestScore = s;
        }
      }
      score += 20 * Math.min(headings, 5) + 0.5 * Math.min(mentions, 40);
    }
    const result = {score, best};
    this._pages.set(docname, result);
    return result;
  },

  score(result) {
    const [docname, title, anchor, descr, score, _filename, kind] = result;
    if (kind !== "text" && kind !== "title") return score;
    const docTitle = kind === "title" ? title.split(" > ")[0] : title;
    const page = this.page(docname, docTitle);
    if (page.best && kind === "text") {
      result[1] = page.best.heading === docTitle ? docTitle : `${docTitle} › ${page.best.heading}`;
      result[2] = "#" + page.best.id;
      result[3] = page.best.snippet || null;
    }
    // a heading that Sphinx matched by its whole text follows its page's result
    return score + page.score - (kind === "title" ? 1 : 0);
  },
};
