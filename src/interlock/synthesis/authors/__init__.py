"""The three generators as language-model agents (``generator=llm``), kept honest by the graph.

A completion graph is compiled into its task pack by three authors, each a model behind the one
backend interface (:mod:`interlock.core.backend`: transformers, llamacpp, vllm, any
OpenAI-compatible server):

- the **workspace writer** realizes the graph's evidence as the files a person would find (the
  policy as prose, the case records, documents around them) and says where each evidence node
  lives (the evidence index: file and locator);
- the **request writer** writes the public request, seeing the graph's deliverables and the
  files the workspace writer made;
- the **rubric writer** writes the text of each binary criterion, seeing the contract.

What decides a task stays compiled from the graph: the deliverable contract, every criterion's
executable check, the empty deliverable files, the reference solution; a model never writes the
check that decides what is trained on. Each author answers one JSON object of its role's form
(:mod:`~interlock.synthesis.authors.forms`), constrained where the backend can; a reply that is not
that form goes back to the author with the reason, a bounded number of times, and then the task is
rejected with it (:mod:`~interlock.synthesis.authors.agents`). What the authors wrote is then
reviewed as any pack is, by reviews that read the files rather than trust the authors
(:mod:`interlock.review`). Every call is recorded (role, tokens, seconds, attempts).
"""
