"""GPU price feeds: AWS, GCP, Azure and a static file, into the router's price table.

Each feed (``pricing.aws``, ``pricing.azure``, ``pricing.gcp``, ``pricing.static``)
turns its provider's real API into :class:`pricing.feed.Quote` rows; ``pricing.rows``
validates them into ``live.price_table.PriceRow``; ``pricing.refresh`` keeps the last
good rows, writes the price table and each pool's price (``LiveTables.set_price``);
``pricing.watch`` runs that on an interval, on the leader sidecar only.
"""
