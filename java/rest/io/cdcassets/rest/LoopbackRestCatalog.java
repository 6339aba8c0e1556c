package io.cdcassets.rest;

import jakarta.servlet.DispatcherType;
import jakarta.servlet.Filter;
import jakarta.servlet.FilterChain;
import jakarta.servlet.ServletException;
import jakarta.servlet.ServletRequest;
import jakarta.servlet.ServletResponse;
import jakarta.servlet.http.HttpServletRequest;
import jakarta.servlet.http.HttpServletResponse;
import java.io.FileInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.util.EnumSet;
import java.util.HashMap;
import java.util.Map;
import java.util.Properties;
import org.apache.iceberg.CatalogUtil;
import org.apache.iceberg.catalog.Catalog;
import org.apache.iceberg.rest.RESTCatalogAdapter;
import org.apache.iceberg.rest.RESTCatalogServlet;
import org.eclipse.jetty.server.Server;
import org.eclipse.jetty.server.ServerConnector;
import org.eclipse.jetty.servlet.FilterHolder;
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
 * use their name. With {@code rest.auth.token} set, every request must carry it as a bearer token
 * ({@code Authorization: Bearer ...}, what Spark's and pyiceberg's REST clients send for their
 * {@code token} property); others get 401 in the REST protocol's error format. With {@code
 * rest.auth.client-id} and {@code rest.auth.client-secret} too, the protocol's OAuth2 token
 * endpoint ({@code POST /v1/oauth/tokens}, client credentials grant, what the clients do for their
 * {@code credential} property) hands that token to a client that presents them.
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
    String token = properties.remove("rest.auth.token");
    String clientId = properties.remove("rest.auth.client-id");
    String clientSecret = properties.remove("rest.auth.client-secret");
    properties.putIfAbsent("catalog-impl", "org.apache.iceberg.jdbc.JdbcCatalog");
    properties.putIfAbsent("jdbc.schema-version", "V1");
    Catalog catalog =
        CatalogUtil.buildIcebergCatalog(
            name, properties, new org.apache.hadoop.conf.Configuration());

    ServletContextHandler context = new ServletContextHandler(ServletContextHandler.NO_SESSIONS);
    RESTCatalogServlet servlet = new RESTCatalogServlet(new RESTCatalogAdapter(catalog));
    context.addServlet(new ServletHolder(servlet), "/*");
    if (token != null && !token.isEmpty()) {
      context.addFilter(
          new FilterHolder(new BearerToken(token, clientId, clientSecret)),
          "/*",
          EnumSet.of(DispatcherType.REQUEST));
    }

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

  /**
   * Lets a request through only with the expected bearer token (compared in constant time), and
   * answers the token endpoint for the configured client.
   */
  private static final class BearerToken implements Filter {
    private final String token;
    private final byte[] expected;
    private final String clientId;
    private final String clientSecret;

    BearerToken(String token, String clientId, String clientSecret) {
      this.token = token;
      this.expected = ("Bearer " + token).getBytes(StandardCharsets.UTF_8);
      this.clientId = clientId;
      this.clientSecret = clientSecret;
    }

    @Override
    public void doFilter(ServletRequest request, ServletResponse response, FilterChain chain)
        throws IOException, ServletException {
      HttpServletRequest http = (HttpServletRequest) request;
      HttpServletResponse out = (HttpServletResponse) response;
      if ("POST".equals(http.getMethod()) && http.getRequestURI().endsWith("/v1/oauth/tokens")) {
        tokenEndpoint(http, out);
        return;
      }
      String header = http.getHeader("Authorization");
      byte[] given = header == null ? new byte[0] : header.getBytes(StandardCharsets.UTF_8);
      if (MessageDigest.isEqual(expected, given)) {
        chain.doFilter(request, response);
        return;
      }
      out.setStatus(401);
      out.setContentType("application/json");
      out.getWriter()
          .write(
              "{\"error\":{\"message\":\"Not authorized: a valid bearer token is required\","
                  + "\"type\":\"NotAuthorizedException\",\"code\":401}}");
    }

    /** The client credentials grant: the token for the configured client, else 401. */
    private void tokenEndpoint(HttpServletRequest http, HttpServletResponse out)
        throws IOException {
      String id = http.getParameter("client_id");
      String secret = http.getParameter("client_secret");
      boolean known =
          clientId != null
              && clientSecret != null
              && "client_credentials".equals(http.getParameter("grant_type"))
              && id != null
              && secret != null
              && MessageDigest.isEqual(
                  clientId.getBytes(StandardCharsets.UTF_8), id.getBytes(StandardCharsets.UTF_8))
              && MessageDigest.isEqual(
                  clientSecret.getBytes(StandardCharsets.UTF_8),
                  secret.getBytes(StandardCharsets.UTF_8));
      out.setContentType("application/json");
      if (!known) {
        out.setStatus(401);
        out.getWriter()
            .write(
                "{\"error\":\"invalid_client\","
                    + "\"error_description\":\"unknown client or wrong secret\"}");
        return;
      }
      out.setStatus(200);
      out.getWriter()
          .write(
              "{\"access_token\":\""
                  + token
                  + "\",\"token_type\":\"bearer\","
                  + "\"issued_token_type\":\"urn:ietf:params:oauth:token-type:access_token\","
                  + "\"expires_in\":3600}");
    }
  }
}
