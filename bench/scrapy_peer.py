"""Scrapy as the fetch benchmark's peer: fetch every URL of a file once, extract links.

    python bench/scrapy_peer.py URLS_FILE OUT_JSONL [--concurrency 12]

The same job as ``webdb fetch`` on the same fetchlist: robots.txt obeyed, at most one request
per host in flight (``CONCURRENT_REQUESTS_PER_DOMAIN`` 1), ``--concurrency`` in all, no delay,
no retries, redirects not followed; each page's links and anchor texts extracted by Scrapy's
``LinkExtractor`` and written, with its URL, status and title, as one JSON line of a feed.
Prints one JSON line: pages, seconds, CPU seconds.
"""

from __future__ import annotations

import argparse
import json
import resource
import time

import scrapy
from scrapy.crawler import CrawlerProcess
from scrapy.linkextractors import LinkExtractor


class ListSpider(scrapy.Spider):
    name = "list"

    def __init__(self, urls: list[str], **kw) -> None:
        super().__init__(**kw)
        self.urls = urls
        self.links = LinkExtractor()

    async def start(self):
        for u in self.urls:
            yield scrapy.Request(u, callback=self.parse, dont_filter=True)

    def parse(self, response):
        links = [(lk.url, lk.text) for lk in self.links.extract_links(response)] if hasattr(response, "text") else []
        yield {
            "url": response.url,
            "status": response.status,
            "title": response.css("title::text").get() if hasattr(response, "text") else None,
            "links": links,
        }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("urls")
    ap.add_argument("out")
    ap.add_argument("--concurrency", type=int, default=12)
    args = ap.parse_args()
    with open(args.urls) as f:
        urls = [line.strip() for line in f if line.strip()]
    settings = {
        "CONCURRENT_REQUESTS": args.concurrency,
        "CONCURRENT_REQUESTS_PER_DOMAIN": 1,
        "DOWNLOAD_DELAY": 0,
        "ROBOTSTXT_OBEY": True,
        "RETRY_ENABLED": False,
        "REDIRECT_ENABLED": False,
        "COOKIES_ENABLED": False,
        "TELNETCONSOLE_ENABLED": False,
        "LOG_LEVEL": "WARNING",
        "FEEDS": {args.out: {"format": "jsonlines", "overwrite": True}},
        "HTTPERROR_ALLOW_ALL": True,
    }
    process = CrawlerProcess(settings)
    t = time.perf_counter()
    crawler = process.create_crawler(ListSpider)
    process.crawl(crawler, urls=urls)
    process.start()
    elapsed = time.perf_counter() - t
    ru = resource.getrusage(resource.RUSAGE_SELF)
    pages = crawler.stats.get_value("item_scraped_count", 0)
    print(
        json.dumps({"pages": pages, "seconds": round(elapsed, 3), "cpu_seconds": round(ru.ru_utime + ru.ru_stime, 2)})
    )


if __name__ == "__main__":
    main()
