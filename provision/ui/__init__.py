"""``tpuctl ui``: a read-only page of clusters, runs, slices, sweeps and spend, served on loopback
to the browser that opens the URL it prints (a token in it, then a cookie; ``server``).

Everything it shows is read from the records tpuctl already keeps (the buckets' run and sweep
directories, the provider's list of clusters): no server of its own elsewhere, no database.
``shape`` turns records into the page's documents (pure), ``records`` reads them, ``server``
serves the bundled page (``static/``: no CDN, works offline) and the documents as JSON.
"""
