package io.cdcassets.rest;

import java.io.FileInputStream;
import java.io.InputStream;
import java.util.HashMap;
import java.util.Map;
import java.util.Properties;
import org.apache.iceberg.CatalogUtil;
import org.apache.iceberg.catalog.Catalog;
import org.apache.iceberg.rest.RESTCatalogAdapter;
import org.apache.iceberg.rest.RESTCatalogServlet;
import org.eclipse.jetty.server.Server;
import org.eclipse.jetty.server.ServerConnector;
import org.eclipse.jetty.servlet.ServletContextHandler;
import org.eclipse.jetty.servlet.ServletHolder;

/**
 * An Iceberg REST catalog on one loopback port: Iceberg's reference REST adapter over the catalog
 * that a properties file describes (a JDBC catalog: its uri, warehouse, credentials).
 *
 * <p>Arguments: the host to bind, the port, the properties file. The file, not the command line,
 * carries the properties, so that credentials do not show in the process list; they are not
 * logged either. Its {@code catalog-name} is the backend catalog's name: a JDBC catalog keeps
 * the tables of each name apart, so a server over a catalog that engines also open directly must
 * use their name.
 */
public final class LoopbackRestCatalog {
  private LoopbackRestCatalog() {}

  public static void main(String[] args) throws Exception {
    if (args.length != 3) {
      throw new IllegalArgumentException("usage: LoopbackRestCatalog <host> <port> <properties>");
    }
    Properties file = new Properties();
    try (InputStream in = new FileInputStream(args[2])) {
      file.load(in);
    }
    Map<String, String> properties = new HashMap<>();
    for (String name : file.stringPropertyNames()) {
      properties.put(name, file.getProperty(name));
    }
    String name = properties.getOrDefault("catalog-name", "rest_backend");
    properties.remove("catalog-name");
    properties.putIfAbsent("catalog-impl", "org.apache.iceberg.jdbc.JdbcCatalog");
    properties.putIfAbsent("jdbc.schema-version", "V1");
    Catalog catalog =
        CatalogUtil.buildIcebergCatalog(
            name, properties, new org.apache.hadoop.conf.Configuration());

    ServletContextHandler context = new ServletContextHandler(ServletContextHandler.NO_SESSIONS);
    RESTCatalogServlet servlet = new RESTCatalogServlet(new RESTCatalogAdapter(catalog));
    context.addServlet(new ServletHolder(servlet), "/*");

    Server server = new Server();
    ServerConnector connector = new ServerConnector(server);
    connector.setHost(args[0]);
    connector.setPort(Integer.parseInt(args[1]));
    server.addConnector(connector);
    server.setHandler(context);
    server.start();
    System.out.println("REST catalog serving on http://" + args[0] + ":" + args[1]);
    server.join();
  }
}
